"""The child's results as data (wire.py): a report goes through encode and decode unchanged, and anything
that is not one (a wrong type, an unknown field, a missing one, a wrong enum, nesting past any report's) is
refused with the field named."""

from __future__ import annotations

import json

import pytest

from gradaudit.model import (
    EVERY_OUTPUT,
    CheckedOutputs,
    Finding,
    Isolation,
    Note,
    NumericResult,
    Report,
    Severity,
    StabilityResult,
    Target,
)
from gradaudit.wire import WireError, decode, encode


def test_a_report_round_trips_through_json(static_report):
    report = static_report("classifier_argmax")
    assert report.findings and report.flow and report.paths  # every nested kind is in it
    report = Report(**{**report.__dict__, "numeric": [NumericResult("x", CheckedOutputs(("y",)), "fail", float("nan"),
                                                                     1e-3, "float64", 4, order=2),
                                                       NumericResult("*", EVERY_OUTPUT, "skipped", None, None, None, 0,
                                                                     every_source=True),
                                                       NumericResult("w", CheckedOutputs(("y", "z")), "pass", 0.0,
                                                                     1e-3, "float64", 3)],
                       "stability": [StabilityResult("x", "y", -600.0, "ok", reported=None)],
                       "notes": [Note("static", "a static note"), Note("numeric", "a numeric one")],
                       "isolation": Isolation("landlock-abi7", None, 1 << 30, 600.0, ("a",), None)})
    back = decode(Report, json.loads(json.dumps(encode(report))))
    assert back.findings == report.findings and back.flow == report.flow and back.paths == report.paths
    assert back.stability == report.stability and back.isolation == report.isolation and back.notes == report.notes
    assert back.numeric[0].rel_error != back.numeric[0].rel_error  # NaN stays NaN
    assert back.numeric[1:] == report.numeric[1:]
    assert [n.outputs for n in back.numeric] == [CheckedOutputs(("y",)), EVERY_OUTPUT, CheckedOutputs(("y", "z"))]
    assert json.dumps(encode(back)) == json.dumps(encode(report))


def _finding(**change):
    d = encode(Finding("GA201", "gradient-mismatch", Severity.ERROR, "m", "f"))
    d.update(change)
    return d


@pytest.mark.parametrize(("change", "named"), [
    ({"severity": "fatal"}, "severity"),
    ({"code": 201}, "code"),
    ({"sources": "x"}, "sources"),
    ({"sources": [1]}, "sources[0]"),
    ({"__reduce__": "os.system"}, "__reduce__"),
    ({"op": {"op_type": "A", "op_name": "b"}}, "function"),
])
def test_what_is_not_a_finding_is_refused_naming_the_field(change, named):
    with pytest.raises(WireError) as err:
        decode(Finding, _finding(**change), "finding")
    assert named in str(err.value)


def test_nesting_and_sizes_are_bounded():
    deep: list = []
    for _ in range(100):
        deep = [deep]
    with pytest.raises(WireError):
        decode(tuple[str, ...], deep)
    with pytest.raises(WireError):
        decode(Target, {"path": "x" * (2 << 20), "kind": "saved_model", "signature": None})
    assert decode(Target, {"path": "p", "kind": "saved_model", "signature": None}) == Target("p", "saved_model",
                                                                                             None)


def test_a_status_that_does_not_exist_is_refused():
    """Statuses are Literals: a row with a status gradaudit never writes ("passed", or a forged "ok" on a check)
    is not a result."""
    from gradaudit.model import NumericResult

    row = encode(NumericResult("x", CheckedOutputs(("y",)), "pass", 0.0, 1e-3, "float64", 3))
    assert decode(NumericResult, row, "row").status == "pass"
    for status in ("passed", "ok", 1):
        with pytest.raises(WireError) as err:
            decode(NumericResult, dict(row, status=status), "row")
        assert "row.status" in str(err.value)


@pytest.mark.parametrize("outputs", [
    "y",  # the JSON report's label is not the value
    "*",
    {"names": ["y"], "every": True},  # every output, and some named
    {"names": [], "every": False},  # none
    {"names": [""], "every": False},
    {"names": "y,z", "every": False},
    {"names": [1], "every": False},
    {"names": ["y"], "every": "no"},
    {"names": ["y"], "all": True},
])
def test_checked_outputs_that_are_not_a_value_are_refused(outputs):
    """A numeric row's outputs are names or every output: the child cannot send a label, both, or neither."""
    row = encode(NumericResult("x", CheckedOutputs(("y",)), "pass", 0.0, 1e-3, "float64", 3))
    assert row["outputs"] == {"names": ["y"], "every": False}
    with pytest.raises(WireError) as err:
        decode(NumericResult, dict(row, outputs=outputs), "row")
    assert "row.outputs" in str(err.value)


def test_a_runtime_part_s_notes_come_back_as_notes_of_its_stage():
    from gradaudit.results import NumericPart, PrecisionPart, ProbePart, RuntimeResult

    runtime = RuntimeResult(numeric=NumericPart(notes=(Note("numeric", "n"),)),
                            probes=ProbePart(notes=(Note("stability", "p"),)),
                            precision=PrecisionPart(notes=(Note("precision", "q"),)))
    sent = json.loads(json.dumps(encode(runtime)))
    assert sent["numeric"]["notes"] == [{"stage": "numeric", "text": "n"}]
    assert decode(RuntimeResult, sent, "runtime") == runtime


@pytest.mark.parametrize(("part", "notes"), [
    ("numeric", ["a note as a bare string"]),
    ("numeric", [{"stage": "numeric"}]),  # no text
    ("numeric", [{"stage": "numeric", "text": 3}]),
    ("numeric", [{"stage": "runtime", "text": "a stage that does not exist"}]),
    ("numeric", [{"stage": "static", "text": "another stage's note"}]),
    ("probes", [{"stage": "numeric", "text": "the numeric stage's, in the probes"}]),
    ("precision", [{"stage": "", "text": "a stage not said"}]),
])
def test_a_malformed_note_is_refused(part, notes):
    from gradaudit.results import NumericPart, PrecisionPart, ProbePart, RuntimeResult

    sent = encode(RuntimeResult(numeric=NumericPart(), probes=ProbePart(), precision=PrecisionPart()))
    sent[part]["notes"] = notes
    with pytest.raises(WireError) as err:
        decode(RuntimeResult, sent, "runtime")
    assert f"runtime.{part}" in str(err.value)
