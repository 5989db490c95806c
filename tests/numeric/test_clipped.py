"""TensorFlow's reason in a finding is cut at a sentence's end, not mid-word (tester 23: GA321 ended "... e.g.")."""

from __future__ import annotations

from gradaudit.numeric.second_order import clipped

LOOKUP = ("LookupError: No gradient defined for operation'IdentityN' (op type: IdentityN). In general every operation "
          "must have an associated `@tf.RegisterGradient` for correct autodiff, which this op is lacking. If you want "
          "to pretend this operation is a constant in your program, you may insert `tf.stop_gradient`. This can be "
          "useful to silence the error in cases where you know gradients are not needed, e.g. the forward pass of "
          "tf.custom_gradient.")


def test_a_long_reason_ends_at_its_last_whole_sentence():
    assert len(LOOKUP) > 400
    assert clipped(LOOKUP) == LOOKUP[:LOOKUP.index("`tf.stop_gradient`.") + len("`tf.stop_gradient`.")]
    assert clipped(LOOKUP, 120) == "LookupError: No gradient defined for operation'IdentityN' (op type: IdentityN)."


def test_an_abbreviation_is_no_sentence_end_and_a_short_reason_is_whole():
    text = "A " * 30 + "reason, e.g. this one " + "word " * 100
    cut = clipped(text, 120)
    assert not cut.endswith("e.g.") and cut.endswith(" ...") and len(cut) <= 124
    assert clipped("Short. Reason.") == "Short. Reason."
