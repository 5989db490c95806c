"""One audit says what it is doing, stage by stage, to an observer; piped output gets none of it."""

from __future__ import annotations

import os

from click.testing import CliRunner

from gradaudit.api import AuditOptions, audit_saved_model
from gradaudit.cli import main
from gradaudit.progress import observed


def test_stages_are_said_in_order(samples):
    said: list[str] = []
    with observed(said.append):
        audit_saved_model(os.path.join(samples, "mlp"), AuditOptions())
    firsts = list(dict.fromkeys(m.split(":")[0] for m in said))
    assert firsts == ["static pass", "numeric checks", "stability probes"]
    assert any(m.startswith("numeric checks: checking") for m in said)


def test_nothing_when_stderr_is_not_a_terminal(samples):
    result = CliRunner().invoke(main, [os.path.join(samples, "mlp"), "--static-only", "--format", "json"])
    assert result.exit_code == 0 and "gradaudit:" not in result.stderr
