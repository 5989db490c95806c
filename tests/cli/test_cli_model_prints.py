"""A model that prints to stdout while it runs in gradaudit's own process (--timeout 0: PrintV2 is pure
computation and allowed) cannot corrupt a report written to stdout: the audit runs with file descriptor 1
pointed away from it, and the report is written to the real stdout afterwards."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import tensorflow as tf

from .cli_helpers import REPO

PWNED = "::error::pwned"


@pytest.fixture(scope="module")
def printing_model(tmp_path_factory) -> str:
    class Printer(tf.Module):
        def __init__(self):
            self.w = tf.Variable(2.0, name="w")

        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="x")])
        def __call__(self, x):
            tf.print(PWNED, "\x1b[2J", output_stream=sys.stdout)
            return {"y": x * self.w}

    module = Printer()
    path = str(tmp_path_factory.mktemp("printer") / "model")
    tf.saved_model.save(module, path, signatures={"serving_default": module.__call__})
    return path


def _audit(*args: str, cwd) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    return subprocess.run([sys.executable, "-m", "gradaudit", *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=600)


@pytest.mark.slow
def test_model_prints_in_process_do_not_reach_the_json_report(printing_model, tmp_path):
    result = _audit(printing_model, "--timeout", "0", "--format", "json", cwd=tmp_path)
    assert result.returncode in (0, 1), result.stderr
    doc = json.loads(result.stdout)  # the whole of stdout is the report
    assert doc["numeric"] and PWNED not in result.stdout and "\x1b" not in result.stdout
    # the model did print, and still prints where the report does not go
    written = tmp_path / "report.json"
    result = _audit(printing_model, "--timeout", "0", "--format", "json", "--output", str(written), cwd=tmp_path)
    assert json.loads(written.read_text())["numeric"] and PWNED in result.stdout
