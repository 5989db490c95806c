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


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_a_timeout_that_is_not_a_finite_number_is_a_usage_error(value, tmp_path):
    """The red team's `timeout = nan` (a configuration file) made every audit incomplete at once, and `inf` wrote
    `Infinity` into the JSON report: both exit 2 with one line, from the command line and from a file."""
    from click.testing import CliRunner

    from gradaudit.cli import main

    result = CliRunner().invoke(main, [str(tmp_path), "--static-only", "--timeout", value])
    assert result.exit_code == 2 and "--timeout" in result.output
    config = tmp_path / "gradaudit.toml"
    config.write_text(f"timeout = {value}\n")
    result = CliRunner().invoke(main, [str(tmp_path), "--static-only", "--config", str(config)])
    assert result.exit_code == 2 and "timeout" in result.output and "Traceback" not in result.output
