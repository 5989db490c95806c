"""A numeric check's outputs are a value (model.CheckedOutputs): the names it projected together, or every float
output; the JSON report's `output` string ("y", "y,z", "*") is only how it is written, and reads back as the
same value. Reconciliation reads the names, never the string."""

from __future__ import annotations

import pytest

from gradaudit.model import EVERY_OUTPUT, CheckedOutputs, Finding, NumericResult, OpRef, Severity
from gradaudit.reconcile import explain_mismatches


@pytest.mark.parametrize(("outputs", "float_outputs", "expected", "label"), [
    (("y",), ["y"], CheckedOutputs(("y",)), "y"),  # the only output is named, as the checks always did
    (("y",), ["y", "z"], CheckedOutputs(("y",)), "y"),
    (("y", "z"), ["y", "z"], EVERY_OUTPUT, "*"),
    (("z", "y"), ["y", "z"], EVERY_OUTPUT, "*"),
    (("z", "y"), ["x", "y", "z"], CheckedOutputs(("z", "y")), "z,y"),  # in the check's order
])
def test_a_checks_outputs_and_their_label(outputs, float_outputs, expected, label):
    checked = CheckedOutputs.of(outputs, float_outputs)
    assert checked == expected and checked.label == label
    assert CheckedOutputs.from_label(label) == checked


def test_every_output_names_none_and_is_renamed_as_itself():
    assert EVERY_OUTPUT.every and EVERY_OUTPUT.names == () and EVERY_OUTPUT.renamed({"y": "out"}) is EVERY_OUTPUT
    assert CheckedOutputs(("output_0", "output_1", "z")).renamed({"output_0": "a", "output_1": "b"}) == \
        CheckedOutputs(("a", "b", "z"))


@pytest.mark.parametrize(("names", "every"), [((), False), (("y",), True), (("",), False), (("y", ""), False)])
def test_what_is_not_a_set_of_checked_outputs_is_refused(names, every):
    with pytest.raises(ValueError, match="checked outputs"):
        CheckedOutputs(names, every)


def test_a_numeric_result_holds_the_value_not_its_label():
    with pytest.raises(TypeError, match="CheckedOutputs"):
        NumericResult("x", "y", "pass", 0.0, 1e-3, "float64", 3)  # type: ignore[arg-type]
    row = NumericResult("x", CheckedOutputs(("y", "z")), "pass", 0.0, 1e-3, "float64", 3)
    assert row.outputs.names == ("y", "z") and row.to_dict()["output"] == "y,z"
    every = NumericResult("x", EVERY_OUTPUT, "pass", 0.0, 1e-3, "float64", 3)
    assert every.outputs.names == () and every.to_dict()["output"] == "*"


CUT = Finding("GA104", "stop-gradient", Severity.INFO, "a stop_gradient", "nothing", op=OpRef("StopGradient", "s", "f"),
              sources=("x",), outputs=("y",))


def _fail(outputs: CheckedOutputs) -> NumericResult:
    return NumericResult("x", outputs, "fail", 0.5, 1e-3, "float64", 8)


def test_a_cut_explains_a_check_only_when_it_crosses_every_output_the_check_projected():
    """A cut on y explains the check of y; not a check of y and z together, nor one of every float output when
    the model has z too; it does explain every float output when y is the only one."""
    rows = [_fail(CheckedOutputs(("y",))), _fail(CheckedOutputs(("y", "z"))), _fail(EVERY_OUTPUT)]
    _, two_outputs = explain_mismatches([CUT], rows, set(), ("y", "z"))
    assert [n.expected_by for n in two_outputs] == ["StopGradient 's' (stop-gradient)", None, None]
    _, one_output = explain_mismatches([CUT], rows[2:], set(), ("y",))
    assert one_output[0].expected_by == "StopGradient 's' (stop-gradient)"
    assert [n.outputs for n in two_outputs] == [n.outputs for n in rows]  # the rows keep their outputs
