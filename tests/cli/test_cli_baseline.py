"""Baselines: a run against its own baseline passes; a new cut fails; identity is rule, function (without
TensorFlow's counter), op name, source and output, so a re-export or another checkout still matches."""

from __future__ import annotations

import dataclasses
import json
import shutil

import jsonschema
import pytest

from gradaudit import baseline
from gradaudit.api import AuditOptions, audit_saved_model
from gradaudit.report import json_report
from gradaudit.suppress import Policy

from .cli_helpers import SAMPLES, findings, run, run_json


def _save_classifier(path, round_head: bool):
    """A classifier with an ArgMax head; `round_head` adds a second cut (Round) on a new output."""
    import tensorflow as tf

    class Classifier(tf.Module):
        def __init__(self):
            super().__init__()
            self.w = tf.Variable(tf.ones([4, 3]), name="w")

        @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
        def __call__(self, x):
            logits = x @ self.w
            out = {"probs": tf.nn.softmax(logits), "cls": tf.cast(tf.argmax(logits, -1), tf.float32)}
            if round_head:
                out["rounded"] = tf.round(logits)
            return out

    module = Classifier()
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.__call__})
    return path


@pytest.fixture(scope="module")
def versions(tmp_path_factory):
    """The same model exported twice, as a later commit would: v2 adds a cut."""
    root = tmp_path_factory.mktemp("versions")
    return _save_classifier(root / "v1" / "model", False), _save_classifier(root / "v2" / "model", True)


def test_a_run_against_its_own_baseline_passes(argmax, _isolated):
    first = run(argmax, "--static-only", "--write-baseline", "gradaudit-baseline.json")
    assert first.exit_code == 1
    doc = json.loads((_isolated / "gradaudit-baseline.json").read_text())
    jsonschema.validate(doc, json_report.schema())
    code, again = run_json(argmax, "--baseline", "gradaudit-baseline.json")
    assert code == 0 and findings(again) == [("GA103", "baseline")]
    assert again["summary"] == {"error": 0, "warning": 0, "info": 0} and again["verdict"] == "pass"


def test_a_new_cut_fails_and_the_known_one_stays_known(versions, _isolated):
    v1, v2 = versions
    assert run(v1, "--static-only", "--write-baseline", "b.json").exit_code == 1
    code, doc = run_json(v2, "--baseline", "b.json")
    assert code == 1
    by_op = {f["op_name"]: f.get("suppressed") for f in doc["findings"]}
    assert by_op == {"ArgMax": "baseline", "Round": None}
    old = json.loads((_isolated / "b.json").read_text())["findings"][0]["function"]
    new = next(f["function"] for f in doc["findings"] if f["op_name"] == "ArgMax")
    assert old != new  # the re-export renumbered the function; the baseline still matched


def test_a_moved_checkout_matches_on_the_path_tail(argmax, tmp_path, _isolated):
    a, b = tmp_path / "a" / "models" / "clf", tmp_path / "b" / "models" / "clf"
    shutil.copytree(argmax, a)
    shutil.copytree(argmax, b)
    other = tmp_path / "a" / "models" / "other"
    shutil.copytree(SAMPLES / "quantize_int", other)
    assert run(a, other, "--static-only", "--write-baseline", "many.json").exit_code == 1
    assert run(b, "--static-only", "--baseline", "many.json").exit_code == 0
    # the same graph under a name the baseline does not know is another model: its findings are new
    renamed = tmp_path / "c" / "classifier"
    shutil.copytree(argmax, renamed)
    code, doc = run_json(renamed, "--baseline", "many.json")
    assert code == 1 and findings(doc) == [("GA103", None)]


def test_identity_is_per_source_output_pair(argmax, tmp_path):
    report = audit_saved_model(str(argmax), AuditOptions(static_only=True))
    path = tmp_path / "b.json"
    path.write_text(json_report.render(report))
    policy = Policy(baseline=baseline.load(str(path)))
    (f,) = report.findings
    grown = dataclasses.replace(f, outputs=(*f.outputs, "probs"))   # the same op now also cuts probs
    fewer = dataclasses.replace(f, sources=f.sources[:1])
    reworded = dataclasses.replace(f, message="another message", fix="another fix")
    result = policy.apply(dataclasses.replace(report, findings=[grown, fewer, reworded]))
    assert [x.suppressed for x in result.findings] == [None, "baseline", "baseline"]
    assert report.findings == [f] and f.suppressed is None  # the input report is not changed


@pytest.mark.parametrize("content, message", [
    ("{not json", "the baseline is not JSON"),
    ('{"hello": 1}', "not a gradaudit JSON report"),
    ('{"schema_version": 1, "reports": [{"findings": []}]}', "not a gradaudit JSON report"),
])
def test_a_bad_baseline_is_exit_2(argmax, _isolated, content, message):
    (_isolated / "bad.json").write_text(content)
    result = run(argmax, "--static-only", "--baseline", "bad.json")
    assert result.exit_code == 2 and message in result.stderr and result.stdout == ""
    result = run(argmax, "--static-only", "--baseline", "missing.json")
    assert result.exit_code == 2 and "cannot read the baseline" in result.stderr
