"""The part of an audit that runs the model runs confined (safety/sandbox.py, isolate.py): with
--allow-unsafe-ops a model that writes or reads outside its own temporary folder fails to, the report says
which isolation was in force, and a run without isolation says so in one line. The parent's memory watch
stops a child whose resident memory passes --memory-limit."""

from __future__ import annotations

import json
import os

import pytest
import tensorflow as tf
from click.testing import CliRunner
from helpers import save_module

from gradaudit.cli import main
from gradaudit.isolate import ChildFailed, Stopped, run_isolated

pytestmark = pytest.mark.slow  # child processes


def _landlock() -> int:
    import landlockpy

    return landlockpy.abi_version()


def canary_model(path: str, written: str, secret: str) -> str:
    """A model whose forward pass writes `written` and reads `secret`, both outside the model and outside
    the temporary folder of the process that runs it."""

    class Canary(tf.Module):
        def __init__(self):
            self.w = tf.Variable(2.0, name="w")

        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="x")])
        def __call__(self, x):
            tf.io.write_file(written, tf.strings.as_string(tf.reduce_sum(x)))
            leaked = tf.strings.to_number(tf.io.read_file(secret))
            return {"y": x * self.w + leaked}

    return save_module(Canary(), path)


@pytest.mark.skipif(not _landlock(), reason="this kernel offers no Landlock")
def test_allowed_unsafe_model_can_neither_write_nor_read_outside(tmp_path):
    written, secret = tmp_path / "written.txt", tmp_path / "secret.txt"
    secret.write_text("0.0")
    path = canary_model(str(tmp_path / "canary"), str(written), str(secret))
    before = os.stat(secret).st_atime_ns
    out = tmp_path / "r.json"
    result = CliRunner().invoke(main, [path, "--allow-unsafe-ops", "--json", str(out)])
    assert result.exit_code == 1, result.output  # default --timeout: the model ran in the confined child
    doc = json.loads(out.read_text())
    assert not written.exists()  # the write failed
    assert os.stat(secret).st_atime_ns == before  # the read never happened (relatime may skip the check)
    assert doc["isolation"]["filesystem"] == f"landlock-abi{_landlock()}" and doc["isolation"]["missing"] == []
    assert doc["isolation"]["time_budget_s"] == 600 and doc["isolation"]["memory_limit_bytes"] > 0
    # GA401 fails the run; the checks that could not run say why
    assert doc["verdict"] == "fail" and not any(n["status"] == "pass" for n in doc["numeric"])
    assert "Permission denied" in " ".join(doc["incomplete"]), doc["incomplete"]


def test_a_run_without_isolation_says_so_in_one_line(samples, tmp_path):
    out = tmp_path / "r.json"
    result = CliRunner().invoke(main, [os.path.join(samples, "mlp"), "--timeout", "0", "--json", str(out)])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("isolation:")]
    assert len(lines) == 1 and "gradaudit's own process" in lines[0]
    isolation = json.loads(out.read_text())["isolation"]
    assert isolation["filesystem"] is None and isolation["time_budget_s"] is None and isolation["missing"]


def test_nothing_run_reports_no_isolation(samples, tmp_path):
    out = tmp_path / "r.json"
    result = CliRunner().invoke(main, [os.path.join(samples, "mlp"), "--static-only", "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text())["isolation"] is None
    assert "isolation:" not in result.output


def test_memory_watch_stops_a_child_past_its_limit():
    """No TensorFlow here: the child holds 1.2 GiB, under its RLIMIT_DATA backstop but over the 256 MiB the
    parent watches."""
    code = "data = bytearray(1200 << 20)\nimport time\ntime.sleep(120)"
    with pytest.raises(Stopped) as stopped:
        run_isolated(exec, (code,), 300.0, (), memory_limit=256 << 20)
    assert isinstance(stopped.value.reason, ChildFailed)
    assert "used more than its memory limit of 0.25 GiB (--memory-limit)" in str(stopped.value)
    assert stopped.value.isolation.memory_limit_bytes == 256 << 20


def test_memory_limit_from_a_configuration_file(samples, tmp_path):
    """The configuration key is the option's name; a value that is not a size is refused (exit 2): in one line
    from the file, as click's usage error on the command line."""
    config = tmp_path / "gradaudit.toml"
    config.write_text('memory-limit = "lots"\n')
    mlp = os.path.join(samples, "mlp")
    result = CliRunner().invoke(main, [mlp, "--static-only", "--config", str(config)])
    assert result.exit_code == 2 and "memory-limit" in result.stderr and "expected a size" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    result = CliRunner().invoke(main, [mlp, "--static-only", "--memory-limit", "lots"])
    assert result.exit_code == 2 and "'--memory-limit': 'lots': expected a size" in result.stderr
    config.write_text('memory-limit = "2G"\n')
    assert CliRunner().invoke(main, [mlp, "--static-only", "--config", str(config)]).exit_code == 0
