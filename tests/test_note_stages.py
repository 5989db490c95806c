"""Each note says which stage wrote it (a Note's `stage`; JSON `note_stages`, in the order of `notes`): a reader
filters by the field, not by the note's first words."""

from __future__ import annotations

import json
import os

import jsonschema
import pytest

from gradaudit.api import AuditOptions, audit_saved_model
from gradaudit.report import json_report
from gradaudit.report.json_load import report_from_dict

HERE = os.path.dirname(os.path.abspath(__file__))
JAX = os.path.join(HERE, "..", "sample_models", "thirdparty", "jax_custom_vjp_wrong_x_gt_2")


@pytest.mark.slow  # a model's numeric checks, seconds
def test_notes_name_their_stage_and_round_trip():
    """A jax2tf model: its float64 copy cannot run (XlaCallModule is compiled for float32), which the numeric
    checks and the probes each note under their own stage, with TensorFlow's reason."""
    r = audit_saved_model(JAX, AuditOptions(timeout=None))
    assert {n.stage for n in r.notes} <= {"static", "numeric", "stability"}
    (numeric,) = r.notes_of("numeric")
    assert numeric.startswith("Float64 evaluation is not possible")
    stability = r.notes_of("stability")
    # the probes' float64 note, why they run at the checks' batch (the model's loss has no batch dimension), and the
    # local checks run where a probe point's whole-model check failed, to name an op of TensorFlow's at fault there
    known = ("Stability probes at a batch of 2", "Local checks at")
    assert stability and all("float64 copy" in n or n.startswith(known) for n in stability)
    assert any("float64 copy" in n for n in stability)
    assert not any("_Float64Failed" in n.text for n in r.notes)  # TensorFlow's error, not gradaudit's wrapper
    doc = json_report.to_dict(r)
    jsonschema.validate(doc, json_report.schema())
    assert doc["notes"] == [n.text for n in r.notes] and doc["note_stages"] == [n.stage for n in r.notes]
    again = report_from_dict(json.loads(json.dumps(doc)))
    assert again.notes == r.notes


def test_reconcile_fills_every_field_of_the_report_but_the_policy():
    """The Report is built from the stages' values in one call: a Report field no stage value reaches would
    silently keep its default."""
    from dataclasses import fields

    from gradaudit.model import (
        BlockedPath,
        CheckedOutputs,
        Finding,
        FlowEntry,
        Isolation,
        LocalCheck,
        Note,
        NumericResult,
        OpRef,
        Output,
        PathStep,
        PrecisionResult,
        Severity,
        Source,
        StabilityResult,
        Target,
    )
    from gradaudit.reconcile import reconcile
    from gradaudit.results import Gate, NumericPart, PrecisionPart, ProbePart, RuntimeResult, StaticResult

    static = StaticResult(
        target=Target("/m", "saved_model", "serving_default", ("serve",)),
        sources=(Source("x", "input", "float32", (2,), True),), outputs=(Output("y", "float32", (2,)),),
        flow=(FlowEntry("x", "y", "connected"),),
        findings=(Finding("GA306", "squared-denominator", Severity.WARNING, "a division", "fix it"),),
        paths=(BlockedPath("x", "y", (PathStep("Floor", "f", "<graph>"),), 0),), notes=(Note("static", "s"),))
    runtime = RuntimeResult(
        numeric=NumericPart((NumericResult("x", CheckedOutputs(("y",)), "inconclusive", None, None, "float64", 3),),
                            (), (Note("numeric", "n"),),
                            (LocalCheck(OpRef("Relu", "r", "f"), "op", "pass", "float64", 1e-9, 1e-8, 5),)),
        probes=ProbePart(results=(StabilityResult("x", "y", 1.0, "ok"),), notes=(Note("stability", "p"),),
                         incomplete=("stopped",)),
        precision=PrecisionPart((PrecisionResult("gradient", "x", "float16", None, 2, 0.0, 0.0, 0.0),),),
        isolation=Isolation("landlock-abi7", None, None, None), stopped="did not finish within --timeout 9 s")
    report = reconcile(static, Gate(run=True, seed=3), runtime)
    defaults = type(report)(target=Target("", "saved_model", None))
    unset = {f.name for f in fields(report) if getattr(report, f.name) == getattr(defaults, f.name)}
    assert unset == {"fail_on"}, unset
    assert report.notes == [Note("static", "s"), Note("numeric", "n"), Note("stability", "p")]
    # the inconclusive check decided nothing: the audit says so
    assert any("no numeric check could decide the gradient of x" in line for line in report.incomplete)


def test_a_report_without_note_stages_reads_back_with_unknown_stages():
    """A JSON report written before `note_stages` (or by hand) keeps its notes, each of a stage not said, and
    writes them back as it read them."""
    r = audit_saved_model(os.path.join(HERE, "..", "sample_models", "mlp"), AuditOptions(static_only=True))
    doc = json_report.to_dict(r)
    doc["notes"], doc["note_stages"] = ["first", "second"], ["static"]
    again = report_from_dict(doc)
    assert [(n.stage, n.text) for n in again.notes] == [("static", "first"), ("", "second")]
    assert again.note_texts == ["first", "second"] and again.notes_of("static") == ["first"]
    back = json_report.to_dict(again)
    assert back["notes"] == ["first", "second"] and back["note_stages"] == ["static", ""]
