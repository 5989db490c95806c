"""action.yml: its inputs are documented, its shell steps take inputs only through the environment, and
the steps run here with bash as the runner would run them (pip replaced by a recorder; gradaudit real)."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.slow  # each test runs the action's shell steps

REPO = Path(__file__).resolve().parents[1]
ACTION = yaml.safe_load((REPO / "action.yml").read_text())
STEPS = {s["name"]: s for s in ACTION["runs"]["steps"]}
EXPR = re.compile(r"\$\{\{\s*([^}]+?)\s*\}\}")


def _run_step(name: str, tmp_path: Path, inputs: dict[str, str] | None = None, path_prefix: str = "",
              outputs: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess, dict[str, str]]:
    """Run one `run:` step with bash, its env filled as the runner would: inputs (defaults, then `inputs`),
    github.action_path, steps.<id>.outputs. Returns the process and what it wrote to $GITHUB_OUTPUT."""
    values = {f"inputs.{k}": v.get("default", "") for k, v in ACTION["inputs"].items()}
    values |= {f"inputs.{k}": v for k, v in (inputs or {}).items()}
    values |= {"github.action_path": str(REPO)}
    values |= {f"steps.audit.outputs.{k}": v for k, v in (outputs or {}).items()}
    step = STEPS[name]
    env = {k: EXPR.sub(lambda m: values[m.group(1)], str(v)) for k, v in step.get("env", {}).items()}
    github_output = tmp_path / f"output-{len(list(tmp_path.iterdir()))}"
    github_output.touch()
    full_env = {**os.environ, **env, "GITHUB_OUTPUT": str(github_output),
                "PATH": path_prefix + os.environ["PATH"]}
    script = tmp_path / f"step-{len(list(tmp_path.iterdir()))}.sh"
    script.write_text(step["run"])
    # how the runner runs a `shell: bash` step
    proc = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)], cwd=tmp_path,
                          env=full_env, capture_output=True, text=True, timeout=300)
    written = dict(line.split("=", 1) for line in github_output.read_text().splitlines() if "=" in line)
    return proc, written


def test_inputs_are_documented_and_scripts_never_paste_them():
    assert ACTION["runs"]["using"] == "composite"
    for name, spec in ACTION["inputs"].items():
        assert spec.get("description"), name
        assert spec.get("required") or "default" in spec, name
    runs = [s for s in ACTION["runs"]["steps"] if "run" in s]
    assert [s["name"] for s in runs] == ["Install gradaudit", "Audit", "Verdict"]
    for step in runs:
        assert step["shell"] == "bash" and "${{" not in step["run"], step["name"]
    uses = {s["uses"].split("@")[0] for s in ACTION["runs"]["steps"] if "uses" in s}
    assert uses == {"actions/setup-python", "github/codeql-action/upload-sarif", "actions/upload-artifact"}
    # the readme documents every input
    readme = (REPO / "README.md").read_text()
    assert all(f"`{name}`" in readme for name in ACTION["inputs"])


@pytest.fixture
def fake_python(tmp_path) -> str:
    """A `python` that records its arguments instead of installing anything."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "python"
    script.write_text('#!/usr/bin/env bash\nprintf "%s\\n" "$@" > "$RECORD"\n')
    script.chmod(0o755)
    return str(bin_dir) + os.pathsep


def test_install_step_installs_the_action_or_the_given_requirements(tmp_path, fake_python, monkeypatch):
    record = tmp_path / "record.txt"
    monkeypatch.setenv("RECORD", str(record))
    proc, _ = _run_step("Install gradaudit", tmp_path, path_prefix=fake_python)
    assert proc.returncode == 0, proc.stderr
    assert record.read_text().splitlines()[-1] == str(REPO)
    proc, _ = _run_step("Install gradaudit", tmp_path, {"install": "gradaudit==0.1.0  tensorflow-text"},
                        path_prefix=fake_python)
    assert proc.returncode == 0 and record.read_text().splitlines()[-2:] == ["gradaudit==0.1.0", "tensorflow-text"]


def test_audit_step_writes_the_reports_and_records_the_exit_code(tmp_path):
    (tmp_path / "models").mkdir()
    model = REPO / "sample_models" / "classifier_argmax"
    # a model input trying to run a command stays a (missing) path: gradaudit reports it, bash runs nothing
    proc, out = _run_step("Audit", tmp_path, {"models": f"{model} $(touch${{IFS}}pwned)", "args": "--static-only",
                                              "output-dir": "reports"})
    assert proc.returncode == 0, proc.stderr  # the verdict waits until the reports are uploaded
    assert not (tmp_path / "pwned").exists()
    assert out == {"exit-code": "2", "report-dir": "reports"}  # one model could not be audited
    sarif = json.loads((tmp_path / "reports" / "gradaudit.sarif").read_text())
    assert sarif["runs"][0]["results"][0]["ruleId"] == "GA103"
    page = (tmp_path / "reports" / "gradaudit.html").read_text()
    assert "ArgMax" in page and "not audited" in page
    doc = json.loads((tmp_path / "reports" / "gradaudit.json").read_text())
    assert doc["verdict"] == "fail" and len(doc["reports"]) == 1


def test_verdict_step_fails_the_job_unless_told_not_to(tmp_path):
    for code, fail, expected in (("1", "true", 1), ("0", "true", 0), ("2", "false", 0), ("", "true", 2)):
        proc, _ = _run_step("Verdict", tmp_path, {"fail": fail}, outputs={"exit-code": code})
        assert proc.returncode == expected, (code, fail, proc.stdout)


def test_empty_models_input_is_an_error(tmp_path):
    proc, out = _run_step("Audit", tmp_path, {"models": "  "})
    assert proc.returncode == 2 and "models" in proc.stderr and out == {}
