"""Targets beside SavedModels, as the CLI passes them to the API: `file.py:attr` (with --input-spec for a
function traced without a signature), and --allow-unsafe-ops, which only the command line may give."""

from __future__ import annotations

import json

import pytest

from .cli_helpers import run

SOURCE = '''
import tensorflow as tf

@tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x")])
def head(x):
    return {"cls": tf.cast(tf.argmax(x, -1), tf.float32), "y": x * 2.0}

@tf.function
def no_signature(x):
    return tf.round(x)
'''


@pytest.fixture(scope="module")
def module_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("targets") / "target_model.py"
    path.write_text(SOURCE)
    return path


def test_python_function_target(module_file, _isolated):
    result = run(f"{module_file}:head", "--static-only", "--format", "json", "--sarif", "r.sarif")
    doc = json.loads(result.stdout)
    assert result.exit_code == 1 and doc["target"]["kind"] == "python"
    assert [(f["code"], f["op_type"]) for f in doc["findings"]] == [("GA103", "ArgMax")]
    sarif = json.loads((_isolated / "r.sarif").read_text())
    location = sarif["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]
    assert location["uri"] == module_file.as_uri()  # the module file, outside the working folder


def test_input_spec_for_a_function_without_signature(module_file):
    target = f"{module_file}:no_signature"
    result = run(target, "--static-only")
    assert result.exit_code == 2 and "--input-spec" in result.stderr
    code = run(target, "--static-only", "--input-spec", "x=float32[None,3]").exit_code
    assert code == 1  # Round cuts x -> output


def test_allow_unsafe_ops_is_command_line_only(argmax, _isolated):
    (_isolated / "pyproject.toml").write_text("[tool.gradaudit]\nallow-unsafe-ops = true\n")
    result = run(argmax, "--static-only")
    assert result.exit_code == 2 and "allow-unsafe-ops can only be given on the command line" in result.stderr
    (_isolated / "pyproject.toml").unlink()
    assert run(argmax, "--static-only", "--allow-unsafe-ops").exit_code == 1
