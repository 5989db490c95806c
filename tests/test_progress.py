"""One audit says what it is doing, stage by stage, to an observer; piped output gets none of it."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
import threading

import pytest
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


@pytest.mark.slow
def test_python_m_gradaudit_shows_the_stage_on_a_terminal_stderr(samples):
    """`python -m gradaudit` runs the CLI; with stderr a terminal, one audit's status line names the stage
    and the check under way there, and stdout keeps only the report."""
    terminal_end, ours = pty.openpty()
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "200"}
    env.pop("NO_COLOR", None)
    proc = subprocess.Popen([sys.executable, "-m", "gradaudit", os.path.join(samples, "mlp")], stdout=subprocess.PIPE,
                            stderr=ours, stdin=subprocess.DEVNULL, env=env)
    os.close(ours)
    said = bytearray()
    reader = threading.Thread(target=_read_all, args=(terminal_end, said))
    reader.start()
    stdout, _ = proc.communicate(timeout=600)
    reader.join(timeout=60)
    os.close(terminal_end)
    assert proc.returncode == 0
    assert b"PASS" in stdout and b"gradaudit:" not in stdout
    status = said.decode("utf-8", "replace")
    assert "gradaudit: static pass" in status and "gradaudit: numeric checks" in status


def _read_all(fd: int, into: bytearray) -> None:
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # the child closed the terminal
            return
        if not chunk:
            return
        into.extend(chunk)
