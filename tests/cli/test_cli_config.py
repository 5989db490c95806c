"""Configuration: [tool.gradaudit] found upward from the working folder or --config FILE; keys are option
names; default < configuration < command line; an unknown key, rule or value is an error naming it."""

from __future__ import annotations

import json

import pytest

from .cli_helpers import run


def _pyproject(folder, body: str):
    path = folder / "pyproject.toml"
    path.write_text("[project]\nname = 'x'\n\n[tool.gradaudit]\n" + body)
    return path


def test_default_then_config_then_command_line(stop, _isolated):
    assert run(stop, "--static-only").exit_code == 0            # default fail-on error; GA106 is info
    _pyproject(_isolated, 'fail-on = "info"\nstatic-only = true\n')
    assert run(stop).exit_code == 1                              # the configuration's fail-on
    assert run(stop, "--fail-on", "error").exit_code == 0        # the command line wins


def test_found_upward_from_a_subfolder(stop, _isolated, monkeypatch):
    _pyproject(_isolated, 'fail-on = "info"\n')
    sub = _isolated / "a" / "b"
    sub.mkdir(parents=True)
    monkeypatch.chdir(sub)
    assert run(stop, "--static-only").exit_code == 1


def test_nearest_pyproject_without_the_table_is_skipped(stop, _isolated, monkeypatch):
    _pyproject(_isolated, 'fail-on = "info"\n')
    sub = _isolated / "pkg"
    sub.mkdir()
    (sub / "pyproject.toml").write_text("[project]\nname = 'inner'\n")
    monkeypatch.chdir(sub)
    assert run(stop, "--static-only").exit_code == 1


def test_config_file_replaces_the_pyproject(stop, _isolated):
    _pyproject(_isolated, 'fail-on = "info"\n')
    other = _isolated / "ci.toml"
    other.write_text('fail-on = "never"\n')  # a plain TOML file holds the keys at its top level
    assert run(stop, "--static-only", "--config", other).exit_code == 0
    named = _isolated / "sub" / "pyproject.toml"
    named.parent.mkdir()
    named.write_text('[tool.gradaudit]\nfail-on = "info"\nexit-zero = true\n')
    assert run(stop, "--static-only", "--config", named).exit_code == 0


def test_flags_set_in_the_config_can_be_turned_off(argmax, _isolated):
    _pyproject(_isolated, "exit-zero = true\n")
    assert run(argmax, "--static-only").exit_code == 0
    assert run(argmax, "--static-only", "--no-exit-zero").exit_code == 1


def test_lists_per_rule_tables_and_relative_paths(argmax, _isolated, monkeypatch):
    _pyproject(_isolated, 'static-only = true\njson = "out/report.json"\n'
                          'ignore-ops = {zero-gradient = ["Arg*"]}\nselect = ["GA1"]\n')
    sub = _isolated / "sub"
    sub.mkdir()
    monkeypatch.chdir(sub)
    result = run(argmax)
    assert result.exit_code == 0
    doc = json.loads((_isolated / "out" / "report.json").read_text())  # relative to the pyproject
    assert [f.get("suppressed") for f in doc["findings"]] == ["ignore-ops zero-gradient:Arg*"]


@pytest.mark.parametrize("body, named", [
    ('fail_on = "info"\n', "unknown key 'fail_on' (did you mean 'fail-on'?)"),
    ('colour = true\n', "unknown key 'colour'"),
    ('select = ["GA9"]\n', "select: unknown rule 'GA9'"),
    ('ignore-ops = {no-such-rule = ["x"]}\n', "ignore-ops: unknown rule 'no-such-rule'"),
    ('fail-on = "sometimes"\n', "fail-on: 'sometimes' is not one of"),
    ('static-only = "yes"\n', "static-only: expected true or false"),
    ('jobs = 0\n', "jobs: 0 is not in the range"),
    ('signature = ["a", "b"]\n', "signature: expected one value"),
    ('config = "other.toml"\n', "unknown key 'config'"),
])
def test_bad_configuration_is_exit_2_naming_it(stop, _isolated, body, named):
    path = _pyproject(_isolated, body)
    result = run(stop, "--static-only")
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.startswith(f"gradaudit: error: {path} [tool.gradaudit]: ")
    assert named in result.stderr and len(result.stderr.splitlines()) == 1


def test_bad_files_are_exit_2(stop, _isolated):
    broken = _isolated / "broken.toml"
    broken.write_text("fail-on = \n")
    result = run(stop, "--config", broken)
    assert result.exit_code == 2 and "not valid TOML" in result.stderr
    empty = _isolated / "x" / "pyproject.toml"
    empty.parent.mkdir()
    empty.write_text("[project]\nname = 'x'\n")
    result = run(stop, "--config", empty)
    assert result.exit_code == 2 and "no [tool.gradaudit] table" in result.stderr


def test_unknown_rule_on_the_command_line_is_exit_2(stop):
    for option in ("--select", "--ignore"):
        result = run(stop, "--static-only", option, "GA1,nope")
        assert result.exit_code == 2 and "unknown rule 'nope'" in result.stderr
    result = run(stop, "--static-only", "--ignore-ops", "GA999:Arg*")
    assert result.exit_code == 2 and "unknown rule 'GA999'" in result.stderr


@pytest.mark.parametrize("key, value", [("output", "/tmp/gradaudit-config-outside.txt"),
                                        ("sarif", "../outside.sarif"), ("html", "reports/../../outside.html")])
def test_a_file_may_not_write_reports_outside_its_project(stop, _isolated, key, value):
    _pyproject(_isolated, f'{key} = "{value}"\n')
    result = run(stop, "--static-only")
    assert result.exit_code == 2 and "outside the project" in result.stderr
    assert not (_isolated.parent / "outside.sarif").exists() and not (_isolated.parent / "outside.html").exists()


def test_a_file_may_write_inside_and_the_command_line_anywhere(stop, _isolated):
    (_isolated / "reports").mkdir()
    _pyproject(_isolated, 'sarif = "reports/gradaudit.sarif"\n')
    assert run(stop, "--static-only").exit_code == 0 and (_isolated / "reports" / "gradaudit.sarif").exists()
    outside = _isolated.parent / "cli-outside.sarif"
    assert run(stop, "--static-only", "--sarif", outside).exit_code == 0 and outside.exists()


@pytest.mark.parametrize("body", ['timeout = 0\n', 'timeout = 0.0\n', 'memory-limit = 0\n', 'memory-limit = "none"\n',
                                  'memory-limit = "0G"\n'])
def test_a_file_cannot_turn_the_sandbox_off(stop, _isolated, body):
    path = _pyproject(_isolated, body)
    result = run(stop, "--static-only")
    assert result.exit_code == 2 and result.stdout == "" and len(result.stderr.splitlines()) == 1
    assert result.stderr.startswith(f"gradaudit: error: {path} [tool.gradaudit]: {body.split(' =')[0]} = ")
    assert "can only be given on the command line" in result.stderr and "turns the sandbox off" in result.stderr


def test_a_file_may_bound_the_sandbox_and_the_command_line_may_lift_it(stop, _isolated):
    _pyproject(_isolated, 'timeout = 30\nmemory-limit = "2G"\nstatic-only = true\n')
    assert run(stop).exit_code == 0
    assert run(stop, "--timeout", "0", "--memory-limit", "0").exit_code == 0


@pytest.fixture
def marker_module(_isolated, monkeypatch):
    """An importable module that leaves a file behind when imported: whether load-ops ran its code."""
    name = f"gradaudit_marker_{_isolated.parent.name.replace('-', '_')}"
    code = _isolated.parent / "code"
    code.mkdir()
    (code / f"{name}.py").write_text(f"open({str(_isolated.parent / 'imported')!r}, 'w').close()\n")
    monkeypatch.syspath_prepend(str(code))
    return name, _isolated.parent / "imported"


def test_load_ops_from_a_file_is_not_loaded_with_static_only(stop, _isolated, marker_module):
    name, imported = marker_module
    path = _pyproject(_isolated, f'load-ops = ["{name}", "ops/shipped.so"]\n')
    result = run(stop, "--static-only")
    assert result.exit_code == 0 and not imported.exists()  # the missing .so was not tried either
    assert result.stderr == (f"gradaudit: load-ops from {path} not loaded with --static-only; pass --load-ops "
                             "to load it\n")
    result = run(stop, "--static-only", "--load-ops", name)  # the command line loads, and says nothing
    assert result.exit_code == 0 and imported.exists() and "load-ops" not in result.stderr


def test_load_ops_from_a_file_says_it_runs_code(stop, _isolated):
    path = _pyproject(_isolated, 'load-ops = ["gradaudit_no_such_module", "ops/shipped.so"]\n')
    result = run(stop, "--timeout", "0")
    assert result.exit_code == 2  # the module is not there; the line came first
    lines = result.stderr.splitlines()
    assert lines[0] == f"gradaudit: importing gradaudit_no_such_module (load-ops from {path} runs its code)"
    assert lines[1] == f"gradaudit: loading {path.parent / 'ops/shipped.so'} (load-ops from {path} runs its code)"
    assert "no module named 'gradaudit_no_such_module'" in result.stderr
    result = run(stop, "--timeout", "0", "--load-ops", "gradaudit_no_such_module")
    assert result.exit_code == 2 and "runs its code" not in result.stderr
