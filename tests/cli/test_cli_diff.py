"""Two versions of a model, the second a refactor that adds a tf.round: `gradaudit diff` and `--baseline`
name the pair that lost its gradient and the op that cuts it now, and fail."""

from __future__ import annotations

import json

import pytest

from gradaudit.report import changes as changes_report
from gradaudit.report.diff import compare
from gradaudit.report.json_load import load

from .cli_helpers import run


def _save(path, refactored: bool):
    import tensorflow as tf

    class Scorer(tf.Module):
        def __init__(self):
            super().__init__()
            self.w = tf.Variable(tf.ones([4, 2]) * 0.5, name="dense/kernel")
            if refactored:
                self.b = tf.Variable(tf.zeros([2]), name="dense/bias")

        @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
        def __call__(self, x):
            h = tf.tanh(x @ self.w)
            if not refactored:
                return {"score": h}
            # the refactor: scores are rounded for display, and a new calibrated output is added
            return {"score": tf.round(h * 10.0) / 10.0, "calibrated": tf.nn.softmax(x @ self.w + self.b)}

    module = Scorer()
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.__call__})
    return path


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    """(folder, old.json, new.json): JSON reports of v1 and v2, exported to different folders."""
    root = tmp_path_factory.mktemp("refactor")
    v1, v2 = _save(root / "v1" / "scorer", False), _save(root / "v2" / "scorer", True)
    old, new = root / "old.json", root / "new.json"
    assert run(v1, "--static-only", "--format", "json", "-o", old).exit_code == 0
    assert run(v2, "--static-only", "--format", "json", "-o", new).exit_code == 1
    return root, old, new


def test_the_pair_that_lost_its_gradient_and_the_op(reports):
    _, old, new = reports
    d = compare(load(str(old)).reports, load(str(new)).reports, "old.json", "new.json")
    (model,) = d.models
    assert model.state == "changed"
    lost = {(p.source, p.output): p for p in model.lost}
    assert set(lost) == {("x", "score"), ("dense/kernel", "score")}
    assert {c.op.op_type for p in lost.values() for c in p.cuts} == {"Round"}
    assert all(p.old == "connected" and p.new == "blocked" for p in lost.values())
    assert model.sources_added == ("dense/bias",) and model.outputs_added == ("calibrated",)
    assert model.sources_removed == model.outputs_removed == () == model.findings_gone
    assert [(f.code, f.op.op_type) for f in model.findings_new] == [("GA103", "Round")]
    assert d.fails()


def test_the_same_report_twice_has_no_change(reports):
    _, old, _ = reports
    d = compare(load(str(old)).reports, load(str(old)).reports)
    assert [m.state for m in d.models] == ["unchanged"] and not d.fails() and not d.changed()


def test_diff_command_in_every_format(reports):
    root, old, new = reports
    text = run("diff", old, new)
    assert text.exit_code == 1
    assert "LOST x → score: connected → blocked, cut by Round 'Round' (zero-gradient)" in text.stdout
    assert "source appeared: dense/bias" in text.stdout and "output appeared: calibrated" in text.stdout
    assert "FAIL: 2 pair(s) lost their gradient" in text.stdout

    md = run("diff", old, new, "--format", "markdown").stdout
    assert md.startswith("## ❌ gradaudit: changes")
    assert "| `x` | `score` | connected | ❌ blocked | Round 'Round' (zero-gradient) |" in md
    assert "- new finding GA103 zero-gradient:" in md

    doc = json.loads(run("diff", old, new, "--format", "json").stdout)
    assert doc["verdict"] == "fail" and doc["lost_pairs"] == 2
    (pair,) = [p for p in doc["models"][0]["pairs"] if p["source"] == "x"]
    assert pair["lost"] and pair["blocked_by"][0]["op_type"] == "Round"

    page = root / "diff.html"
    assert run("diff", old, new, "--format", "html", "-o", page).exit_code == 1
    body = page.read_text()
    assert '<tr class="pair-change lost-pair" data-source="x" data-output="score">' in body
    assert "<code>Round</code>" in body and 'class="badge v-fail"' in body

    assert run("diff", old, new, "--exit-zero").exit_code == 0
    assert run("diff", new, old).exit_code == 0  # gaining a gradient back is no failure


def test_baseline_reports_the_changes_and_fails_on_a_lost_pair(reports):
    root, old, _ = reports
    result = run(root / "v2" / "scorer", "--static-only", "--baseline", old, "--ignore", "GA103",
                 "--markdown", root / "pr.md", "--html", root / "pr.html")
    # no finding fails (GA103 ignored), but the pair that lost its gradient since the baseline does
    assert result.exit_code == 1
    assert "LOST x → score: connected → blocked, cut by Round" in result.stdout
    assert "| `x` | `score` | connected | ❌ blocked |" in (root / "pr.md").read_text()
    assert 'id="changes"' in (root / "pr.html").read_text()
    assert run(root / "v2" / "scorer", "--static-only", "--baseline", old, "--ignore", "GA103",
               "--exit-zero").exit_code == 0


def test_machine_reports_say_what_the_baseline_fails(reports):
    """The run fails on the lost pairs alone (GA103 ignored): the JSON, JUnit and GitHub reports must say so,
    or a dashboard reading them shows green beside a red job."""
    root, old, _ = reports
    result = run(root / "v2" / "scorer", "--static-only", "--baseline", old, "--ignore", "GA103",
                 "--format", "json", "--output", root / "b.json", "--junit", root / "b.xml")
    assert result.exit_code == 1
    doc = json.loads((root / "b.json").read_text())
    assert doc["verdict"] == "pass"  # the model's own findings
    assert doc["since_baseline"]["verdict"] == "fail" and doc["since_baseline"]["lost_pairs"] == 2
    import xml.etree.ElementTree as ET

    junit = ET.parse(root / "b.xml").getroot()
    lost = [c.get("name") for c in junit.iter("testcase") if c.find("failure") is not None]
    assert sorted(lost) == ["dense/kernel -> score", "x -> score"] and junit.get("failures") == "2"
    github = run(root / "v2" / "scorer", "--static-only", "--baseline", old, "--ignore", "GA103",
                 "--format", "github")
    assert github.exit_code == 1
    assert github.stdout.count("::error title=gradaudit%3A gradient lost since the baseline::") == 2


def test_not_a_report_is_exit_2(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema_version": 7}')
    result = run("diff", bad, bad)
    assert result.exit_code == 2 and result.stderr.count("\n") == 1 and "not a gradaudit JSON report" in result.stderr


def test_every_diff_format_renders(reports):
    _, old, new = reports
    d = compare(load(str(old)).reports, load(str(new)).reports)
    for fmt, render in changes_report.DIFF_REPORTERS.items():
        assert "score" in render(d), fmt
