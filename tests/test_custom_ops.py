"""Ops of a custom op package that is not loaded are `unknown` where they lie on a float path (an error), at
most one info line where they touch only strings; --load-ops makes them known with their real gradients.

The package is real: tests/ops_pkg/gradaudit_testops, compiled here with g++ against this TensorFlow. Loading
an op library cannot be undone in a process, so the tests that need the ops unknown come first in this file.
"""

from __future__ import annotations

import os
import runpy
import sys

import pytest
from click.testing import CliRunner

from gradaudit.api import AuditOptions, audit_saved_model
from gradaudit.cli import main

pytestmark = pytest.mark.slow  # compiles a custom op library with g++

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
THIRDPARTY = os.path.join(ROOT, "sample_models", "thirdparty")
PKG_DIR = os.path.join(ROOT, "tests", "ops_pkg")


def model(name: str) -> str:
    return os.path.join(THIRDPARTY, name)


@pytest.fixture(scope="module")
def ops_so(tmp_path_factory) -> str:
    compile_ops = runpy.run_path(os.path.join(PKG_DIR, "gradaudit_testops", "build.py"))["compile_ops"]
    return compile_ops(str(tmp_path_factory.mktemp("ops")))


def flow(report) -> dict[tuple[str, str], str]:
    return {(e.source, e.output): e.status for e in report.flow}


def test_unknown_op_on_a_float_path_makes_its_pairs_unknown():
    from gradaudit.graph.gradients import registry_kind

    assert registry_kind("GaScale").value == "missing", "the op library is already loaded in this process"
    report = audit_saved_model(model("customop_float"), AuditOptions(static_only=True))
    unknown = {pair for pair, s in flow(report).items() if s == "unknown"}
    assert ("x", "y") in unknown and not any(s == "blocked" for s in flow(report).values())
    [f] = [f for f in report.findings if f.rule == "unknown-op" and f.severity.value == "error"]
    assert f.op.op_type == "GaScale" and "--load-ops" in f.message and "--load-ops" in f.fix
    assert report.verdict() == "fail"


def test_unknown_op_on_a_string_path_decides_no_gradient():
    report = audit_saved_model(model("customop_string"), AuditOptions(static_only=True))
    assert set(flow(report).values()) == {"connected"}
    unknown = [f for f in report.findings if f.rule == "unknown-op"]
    assert len(unknown) == 1 and unknown[0].severity.value == "info" and "GaStrLen" in unknown[0].message
    assert report.verdict() == "pass"


def test_a_decision_with_an_unknown_op_fails_the_cli():
    result = CliRunner().invoke(main, [model("customop_float"), "--static-only"])
    assert result.exit_code == 1 and "unknown" in result.output


def test_load_ops_errors_are_one_line(tmp_path):
    result = CliRunner().invoke(main, [model("customop_float"), "--static-only", "--load-ops", "no_such_pkg_xyz"])
    assert result.exit_code == 2 and "no module named 'no_such_pkg_xyz'" in result.stderr
    result = CliRunner().invoke(main, [model("customop_float"), "--static-only", "--load-ops",
                                       str(tmp_path / "missing.so")])
    assert result.exit_code == 2 and "no such file" in result.stderr


def test_load_ops_library_alone_knows_the_op_but_not_the_python_gradient(ops_so):
    """The .so registers the op; the package's Python code registers GaScale's gradient. Loaded alone, the
    op is known and has no gradient: a real cut (TensorFlow would raise LookupError)."""
    report = audit_saved_model(model("customop_float"), AuditOptions(static_only=True, load_ops=(ops_so,)))
    assert flow(report)[("x", "y")] == "blocked"
    assert {c.op.op_type for c in next(e for e in report.flow if (e.source, e.output) == ("x", "y")).blocked_by} \
        == {"GaScale"}
    assert "no-gradient" in {f.rule for f in report.findings}


def test_load_ops_package_gives_real_statuses(ops_so, monkeypatch):
    monkeypatch.setenv("GRADAUDIT_TESTOPS_SO", ops_so)
    monkeypatch.syspath_prepend(PKG_DIR)
    result = CliRunner().invoke(main, [model("customop_float"), "--static-only", "--format", "json",
                                       "--load-ops", "gradaudit_testops"])
    assert result.exit_code == 0, result.output
    import json

    doc = json.loads(result.stdout)
    statuses = {(e["source"], e["output"]): e["status"] for e in doc["flow"]}
    assert statuses[("x", "y")] == "connected" and "unknown" not in statuses.values()
    assert not [f for f in doc["findings"] if f["rule"] == "unknown-op"]
    # an op of the same package without any gradient is now a real cut, named
    report = audit_saved_model(model("customop_nograd"), AuditOptions(static_only=True,
                                                                      load_ops=("gradaudit_testops",)))
    assert "blocked" in flow(report).values() and "no-gradient" in {f.rule for f in report.findings}
    assert "gradaudit_testops" in sys.modules


def test_load_ops_from_the_configuration_file(ops_so, tmp_path, monkeypatch):
    """`load-ops` is a configuration key; a library path in the file is relative to the file."""
    import shutil

    lib = tmp_path / "lib"
    lib.mkdir()
    shutil.copy(ops_so, lib / "ops.so")
    (tmp_path / "pyproject.toml").write_text('[tool.gradaudit]\nload-ops = ["lib/ops.so"]\n')
    monkeypatch.chdir(tmp_path)
    # --timeout 0: the numeric checks run here, without starting the sandbox's server
    result = CliRunner().invoke(main, [model("customop_float"), "--format", "json", "--timeout", "0"])
    assert result.exit_code in (0, 1), result.output  # not "no such file": the path was read beside the file
    assert f"gradaudit: loading {lib / 'ops.so'} (load-ops from {tmp_path / 'pyproject.toml'} runs its code)" in (
        result.stderr)
    import json

    doc = json.loads(result.stdout)  # known now (the package's gradient may already be registered here)
    assert "unknown" not in {e["status"] for e in doc["flow"]}
    # with --static-only, which runs nothing, the file's load-ops is not loaded (the command line's would be)
    result = CliRunner().invoke(main, [model("customop_float"), "--static-only"])
    assert "load-ops from" in result.stderr and "not loaded with --static-only" in result.stderr
    (tmp_path / "pyproject.toml").write_text('[tool.gradaudit]\nload-ops = ["lib/missing.so"]\n')
    result = CliRunner().invoke(main, [model("customop_float"), "--timeout", "0"])
    assert result.exit_code == 2 and "lib/missing.so: no such file" in result.stderr
