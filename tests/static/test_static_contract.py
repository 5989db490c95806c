"""The JSON contract (schema_version 1), the rule registry, and the CLI's exit codes and error lines."""

from __future__ import annotations

import json
import os
import re

import jsonschema
import pytest
from click.testing import CliRunner

from gradaudit.cli import main
from gradaudit.report import json_report
from gradaudit.rules import ALL_RULES, DOC_SECTIONS, get_rule

SAMPLES = ["classifier_argmax", "numpy_function", "quantize_int", "stop_gradient", "mlp", "cnn", "case",
           "while_loop", "embedding", "disconnected_variable", "no_gradient_op", "log1pexp_custom"]


@pytest.mark.parametrize("name", SAMPLES)
def test_every_report_matches_the_schema(static_report, name):
    doc = json_report.to_dict(static_report(name))
    jsonschema.validate(doc, json_report.schema())
    assert doc["schema_version"] == 1 and doc["target"]["kind"] == "saved_model"
    assert doc["verdict"] == ("fail" if doc["summary"]["error"] else "pass")


def test_schema_rejects_a_broken_report(static_report):
    doc = json_report.to_dict(static_report("classifier_argmax"))
    doc["flow"][0]["status"] = "maybe"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, json_report.schema())


def test_rule_registry_is_consistent():
    codes = [r.code for r in ALL_RULES]
    slugs = [r.slug for r in ALL_RULES]
    assert len(set(codes)) == len(codes) and len(set(slugs)) == len(slugs)
    for r in ALL_RULES:
        assert re.fullmatch(r"GA[1-9]\d\d", r.code), r.code
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", r.slug), r.slug
        for section in DOC_SECTIONS:
            assert f"## {section}" in r.doc, (r.code, section)
        assert get_rule(r.code) is r and get_rule(r.slug) is r
    for slug in ("no-gradient", "not-differentiable", "zero-gradient", "integer-path", "py-function",
                 "stop-gradient", "custom-gradient", "disconnected-source", "unknown-op"):
        assert get_rule(slug).code.startswith("GA1")


@pytest.fixture(scope="module")
def runner():
    return CliRunner()


def run(runner, *args):
    result = runner.invoke(main, list(args), catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def test_exit_codes_follow_fail_on(runner, samples):
    argmax, ste, mlp = (os.path.join(samples, n) for n in ("classifier_argmax", "ste", "mlp"))
    assert run(runner, argmax, "--static-only")[0] == 1
    assert run(runner, argmax, "--static-only", "--fail-on", "never")[0] == 0
    assert run(runner, mlp, "--static-only")[0] == 0
    assert run(runner, mlp, "--static-only", "--fail-on", "info")[0] == 0
    assert run(runner, ste, "--static-only")[0] == 0  # only an info finding (stop-gradient)
    assert run(runner, ste, "--static-only", "--fail-on", "info")[0] == 1
    dis = os.path.join(samples, "disconnected_variable")
    assert run(runner, dis, "--static-only", "--fail-on", "error")[0] == 0
    assert run(runner, dis, "--static-only", "--fail-on", "warning")[0] == 1


def test_text_report_names_the_cut_and_the_fix(runner, samples):
    code, out, _ = run(runner, os.path.join(samples, "classifier_argmax"), "--static-only")
    assert code == 1
    assert "blocked: ArgMax" in out and "GA103" in out and "zero-gradient" in out
    assert "fix:" in out and "softmax" in out
    assert any(line.startswith("FAIL: 1 error") for line in out.strip().splitlines()[-3:])
    assert "\x1b[" not in out  # no colour codes when not on a terminal


def test_json_to_file(runner, samples, tmp_path):
    dest = tmp_path / "r.json"
    code, out, _ = run(runner, os.path.join(samples, "quantize_int"), "--static-only", "--format", "json",
                       "--output", str(dest))
    assert code == 1 and out == ""
    doc = json.loads(dest.read_text())
    assert [f["rule"] for f in doc["findings"]] == ["integer-path"]
    assert doc["findings"][0]["op_type"] == "Cast"


def test_all_signatures(runner, samples):
    code, out, _ = run(runner, os.path.join(samples, "mlp"), "--static-only", "--all-signatures",
                       "--format", "json")
    doc = json.loads(out)
    jsonschema.validate(doc, json_report.schema())
    assert code == 0 and sorted(r["target"]["signature"] for r in doc["reports"]) == ["serve", "serving_default"]


def _corrupt(tmp_path, samples):
    import shutil

    good = os.path.join(samples, "mlp")
    trunc = tmp_path / "truncated"
    shutil.copytree(good, trunc)
    data = (trunc / "saved_model.pb").read_bytes()
    (trunc / "saved_model.pb").write_bytes(data[: len(data) // 3])
    garbage = tmp_path / "garbage"
    garbage.mkdir()
    (garbage / "saved_model.pb").write_bytes(os.urandom(4096))
    empty = tmp_path / "empty"
    empty.mkdir()
    afile = tmp_path / "a_file"
    afile.write_text("hello")
    return {"missing": (str(tmp_path / "nope"), "no such file"), "file": (str(afile), "not a SavedModel"),
            "empty": (str(empty), "no saved_model.pb"), "truncated": (str(trunc), "cannot be parsed"),
            "garbage": (str(garbage), "cannot be parsed")}


@pytest.mark.parametrize("case", ["missing", "file", "empty", "truncated", "garbage"])
def test_bad_input_is_one_line_and_exit_2(runner, samples, tmp_path, case):
    path, expected = _corrupt(tmp_path, samples)[case]
    code, out, err = run(runner, path, "--static-only")
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert expected in err


def test_unknown_signature_and_tag(runner, samples):
    mlp = os.path.join(samples, "mlp")
    code, _, err = run(runner, mlp, "--signature", "nope", "--static-only")
    assert code == 2 and "serving_default" in err and len(err.strip().splitlines()) == 1
    code, _, err = run(runner, mlp, "--tag", "train", "--static-only")
    assert code == 2 and "serve" in err and len(err.strip().splitlines()) == 1


def test_version_rules_explain(runner):
    code, out, _ = run(runner, "--version")
    assert code == 0 and re.match(r"gradaudit \S+, TensorFlow 2\.\d+", out)
    code, out, _ = run(runner, "rules")
    assert code == 0 and len(out.strip().splitlines()) == len(ALL_RULES)
    code, out, _ = run(runner, "explain", "zero-gradient")
    assert code == 0 and "GA103" in out and "## Use instead" in out
    code, out, _ = run(runner, "explain", "GA101")
    assert code == 0 and "no-gradient" in out
    code, _, err = run(runner, "explain", "GA999")
    assert code == 2 and "no rule" in err


@pytest.mark.slow  # starts a process (the confined child)
def test_inputs_that_do_not_fit_the_signature_exit_2(runner, samples, tmp_path):
    import numpy as np

    model = os.path.join(samples, "classifier_argmax")
    bad = tmp_path / "bad.npz"
    np.savez(bad, x=np.zeros((2, 7), np.float32))
    code, out, err = run(runner, model, "--inputs", str(bad))
    assert code == 2 and out == "" and "shape [2, 7]" in err and len(err.strip().splitlines()) == 1
    code, _, err = run(runner, model, "--shape", "nope=1,2")
    assert code == 2 and "not inputs of the signature" in err
