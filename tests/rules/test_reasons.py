"""A cut's reason lives on its rule: every reason of the catalog names only facts a cut has, every rule the
static pass can give a cut has its own reason, and a special case is one of its rule's reasons."""

from __future__ import annotations

import string

import pytest

from gradaudit.rules import ALL_RULES, get_rule
from gradaudit.rules import flow as flow_rules
from gradaudit.rules.base import REASON_FIELDS, Reason

# the slugs flow.cut_rule gives a cut
CUT_RULES = ("py-function", "stop-gradient", "gradient-raises", "integer-path", "unknown-op", "custom-gradient",
             "zero-gradient", "no-gradient", "not-differentiable", "variable-state")


def test_every_reason_names_only_a_cuts_facts():
    reasons = [reason for r in ALL_RULES for reason in r.reasons]
    assert len(reasons) == 15
    for reason in reasons:
        fields = {name for _, name, _, _ in string.Formatter().parse(reason.template) if name is not None}
        assert fields and fields <= set(REASON_FIELDS), reason.template
        assert reason.text("Op", dtype="int32", custom_gradient="cg", function="fn", module="m", error="e")


@pytest.mark.parametrize("slug", CUT_RULES)
def test_every_cut_rule_has_its_own_reason(slug):
    assert "{t}" in get_rule(slug).reason.template


@pytest.mark.parametrize(("case", "slug"), [("NOT_IMPLEMENTED", "not-differentiable"),
                                            ("ZERO_GRADIENT_UNMEASURED", "zero-gradient"),
                                            ("ACTIVATION_BACKWARD", "zero-gradient"),
                                            ("CUSTOM_GRADIENT_DEAD", "custom-gradient"),
                                            ("COMPILED_GRADIENT_DEAD", "custom-gradient")])
def test_a_special_case_belongs_to_its_rule(case, slug):
    reason = getattr(flow_rules, case)
    assert isinstance(reason, Reason)
    assert reason in get_rule(slug).reasons and reason is not get_rule(slug).reason


def test_a_rule_that_cuts_nothing_has_no_reason():
    assert get_rule("gradient-mismatch").reasons == () and get_rule("disconnected-source").reasons == ()


def test_the_reason_is_worded_from_the_cuts_facts():
    text = get_rule("integer-path").reason.text("Cast", dtype="int32")
    assert text == "Cast converts a float value to int32: gradients stop at integer and bool tensors"
