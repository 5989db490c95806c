"""reconcile.not_checked reads why a check did not decide from the row's `cause` field, not from its wording: the
"pass real examples with --inputs" hint is added unless real examples cannot help (two evaluations at the same point
differ) or the reason already asks for them (the synthesised inputs are in doubt); checks that never ran for want of
an input say so. No TensorFlow: reports built as values."""

from __future__ import annotations

import pytest

from gradaudit.model import EVERY_OUTPUT, EVERY_SOURCE, CheckedOutputs, FlowEntry, NumericResult, Report, Source, Target
from gradaudit.reconcile import not_checked

HINT = "pass real examples with --inputs"


def _report(*rows: NumericResult) -> Report:
    return Report(target=Target("m", "saved_model", "serving_default"),
                  sources=[Source("x", "input", "float32", (None, 4), True)],
                  flow=[FlowEntry("x", "y", "connected")], numeric=list(rows))


def _undecided(reason: str, cause=None) -> NumericResult:
    return NumericResult(source="x", outputs=CheckedOutputs(("y",)), status="inconclusive", rel_error=None,
                         step=None, dtype="float64", evaluations=4, reason=reason, cause=cause)


@pytest.mark.parametrize("cause,hinted", [(None, True), ("nondeterministic", False), ("synthesised_inputs", False)])
def test_the_hint_follows_the_cause(cause, hinted):
    lines = not_checked(_report(_undecided("the difference quotients do not converge", cause)), inputs_given=False)
    assert len(lines) == 1 and lines[0].startswith("no numeric check could decide the gradient of x")
    assert lines[0].endswith(HINT) is hinted


def test_no_hint_when_inputs_were_given():
    assert not not_checked(_report(_undecided("rough", None)), inputs_given=True)[0].endswith(HINT)


def test_checks_that_never_ran_for_want_of_an_input_are_said_by_their_cause():
    row = NumericResult(source=EVERY_SOURCE, outputs=EVERY_OUTPUT, status="skipped", rel_error=None, step=None,
                        dtype=None, evaluations=0, reason="input 'x' has unknown rank", every_source=True,
                        cause="no_input")
    assert not_checked(_report(row), inputs_given=False) == ["numeric checks did not run: input 'x' has unknown rank"]
    other = NumericResult(source=EVERY_SOURCE, outputs=EVERY_OUTPUT, status="skipped", rel_error=None, step=None,
                          dtype=None, evaluations=0, reason="no input to run the model (wording only)",
                          every_source=True)
    assert not any(line.startswith("numeric checks did not run") for line in not_checked(_report(other), False))


def test_the_cause_is_in_the_json_row_and_read_back():
    from gradaudit.report.json_load import _numeric

    row = _undecided("nondeterministic: two evaluations at the same point differ", "nondeterministic")
    d = row.to_dict()
    assert d["cause"] == "nondeterministic"
    assert _numeric(d) == row
    assert "cause" not in _undecided("rough").to_dict()
