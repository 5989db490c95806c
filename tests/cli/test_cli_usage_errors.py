"""Bad usage is bad input: one line on stderr naming the option and exit 2, as for a missing model (click
alone prints the usage and a hint around the error)."""

from __future__ import annotations

import pytest

from .cli_helpers import SAMPLES, run


@pytest.mark.parametrize("args, said", [
    (["--fail-on", "sometimes"], "'--fail-on'"),
    (["--timeout", "-1"], "'--timeout'"),
    (["--shape", "x=a,b"], "--shape"),
    (["--no-such-option"], "--no-such-option"),
    (["--inputs", "/no/such/file.npz"], "--inputs"),
])
def test_bad_option_is_one_line_and_exit_2(args, said):
    result = run(SAMPLES / "mlp", *args)
    assert result.exit_code == 2, result.output
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("gradaudit: error: "), result.stderr
    assert said in result.stderr and "Usage:" not in result.stderr + result.stdout


def test_help_and_version_still_exit_0():
    assert run("--help").exit_code == 0 and "Usage:" in run("--help").stdout
    assert run("rules").exit_code == 0
