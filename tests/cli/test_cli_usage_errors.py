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


@pytest.mark.slow  # a process of its own: TensorFlow must not be imported in it
def test_a_missing_model_is_said_without_importing_tensorflow(tmp_path):
    """A path that does not exist is one line and exit 2 before TensorFlow is imported (tester 10's N4: 8 s to say
    so); a second model that exists is still audited."""
    import subprocess
    import sys

    code = ("import sys\nfrom gradaudit.cli import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit as e:\n"
            "    print('exit', e.code, 'tensorflow' in sys.modules)\n")
    missing = str(tmp_path / "no_such_model")
    done = subprocess.run([sys.executable, "-c", code, missing], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip().splitlines()[-1] == "exit 2 False", (done.stdout, done.stderr)
    assert done.stderr.strip() == f"gradaudit: error: {missing}: no such file or directory"
    both = subprocess.run([sys.executable, "-c", code, missing, str(SAMPLES / "mlp"), "--static-only"],
                          capture_output=True, text=True, timeout=300)
    assert both.stdout.strip().splitlines()[-1] == "exit 2 True" and "PASS" in both.stdout, both.stdout
