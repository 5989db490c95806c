"""Many models per run: arguments, --recursive folders, one JSON entry per model, a summary table,
errors that do not hide the other models, and --jobs worker processes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from gradaudit.batch import find_models

from .cli_helpers import REPO, run, run_json


def _paths(doc: dict) -> list[str]:
    return [os.path.relpath(r["target"]["path"]) for r in doc["reports"]]


def test_recursive_finds_models_but_not_in_hidden_folders(tree, monkeypatch):
    monkeypatch.chdir(tree)
    code, doc = run_json(".", "--recursive")
    assert code == 1 and _paths(doc) == ["models/clf", os.path.join("models", "deep", "mlp")]
    assert [r["verdict"] for r in doc["reports"]] == ["fail", "pass"] and doc["verdict"] == "fail"


def test_a_folder_without_recursive_or_without_models_is_exit_2(tree, tmp_path):
    result = run(tree, "--static-only")
    assert result.exit_code == 2 and "--recursive" in result.stderr
    assert len(result.stderr.splitlines()) == 1
    empty = tmp_path / "empty"
    (empty / "sub").mkdir(parents=True)
    result = run(empty, "--static-only", "--recursive")
    assert result.exit_code == 2 and "no SavedModel found" in result.stderr


def test_saved_model_pb_names_its_folder_and_duplicates_count_once(argmax):
    assert find_models([str(argmax / "saved_model.pb"), str(argmax), str(argmax) + "/"]) == [
        str(argmax / "saved_model.pb").rsplit("/", 1)[0]]
    code, doc = run_json(argmax / "saved_model.pb", argmax)
    assert code == 1 and doc["target"]["path"] == str(argmax)  # one model: the single-model shape


def test_one_entry_per_model_and_signature(argmax, mlp):
    code, doc = run_json(argmax, mlp, "--all-signatures")
    assert code == 1
    assert sorted((os.path.basename(r["target"]["path"]), r["target"]["signature"]) for r in doc["reports"]) == [
        ("classifier_argmax", "serving_default"), ("mlp", "serve"), ("mlp", "serving_default")]
    assert doc["summary"] == {"error": 1, "warning": 0, "info": 0}


def test_an_error_is_reported_beside_the_other_models(mlp, tmp_path):
    missing = tmp_path / "missing"
    code, doc = run_json(mlp, missing)
    assert code == 2
    assert [os.path.basename(r["target"]["path"]) for r in doc["reports"]] == ["mlp"]
    assert doc["errors"] == [{"path": str(missing), "error": f"{missing}: no such file or directory"}]
    assert doc["verdict"] == "fail"


def test_text_ends_with_a_summary_table(tree, monkeypatch):
    monkeypatch.chdir(tree)
    result = run("models/clf", "models/deep/mlp", "missing", "--static-only")
    assert result.exit_code == 2
    summary = result.stdout[result.stdout.index("Summary (fail-on: error)"):]
    rows = [[cell.strip() for cell in line.split("│")[1:3]] for line in summary.splitlines()
            if line.startswith("│ ")]
    assert rows == [["models/clf [serving_default]", "FAIL"], ["models/deep/mlp [serving_default]", "PASS"],
                    ["missing", "ERROR"]]
    assert result.stderr.strip().endswith("missing: no such file or directory")  # no progress bar in a log


def test_jobs_audit_in_worker_processes_with_the_same_result(argmax, mlp, stop):
    sequential = run_json(argmax, mlp, stop)
    parallel = run_json(argmax, mlp, stop, "--jobs", "2")
    assert parallel[0] == sequential[0] == 1
    assert [r["findings"] for r in parallel[1]["reports"]] == [r["findings"] for r in sequential[1]["reports"]]
    assert _paths(parallel[1]) == _paths(sequential[1])


@pytest.mark.slow
def test_the_console_script(argmax):
    script = shutil.which("gradaudit") or pytest.skip("console script not installed")
    done = subprocess.run([script, str(argmax), "--static-only", "--format", "sarif"], capture_output=True,
                          text=True, cwd=REPO, timeout=300, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert done.returncode == 1, done.stderr
    assert done.stderr == ""  # TensorFlow's start-up chatter stays out of our stderr
    result = json.loads(done.stdout)["runs"][0]["results"][0]
    assert result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == \
        "sample_models/classifier_argmax/saved_model.pb"


def test_a_folder_that_is_not_a_model_is_reported_beside_the_others(mlp, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    code, doc = run_json(mlp, empty)
    assert code == 2
    assert [os.path.basename(r["target"]["path"]) for r in doc["reports"]] == ["mlp"]
    assert doc["errors"][0]["path"] == str(empty) and "not a SavedModel" in doc["errors"][0]["error"]
