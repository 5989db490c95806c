"""No flow status gradaudit states contradicts what tf.GradientTape says on the loaded model: on every sample
model (truth computed here) and every third-party fixture (truth recorded by its builder with the library)."""

from __future__ import annotations

import glob
import os

import pytest
from truth import compared, contradictions, recorded_truth, tape_truth

from gradaudit.api import AuditOptions, audit_saved_model
from gradaudit.targets.saved_model import SavedModelFile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
THIRDPARTY = sorted(os.path.dirname(p) for p in glob.glob(os.path.join(ROOT, "sample_models", "thirdparty", "*",
                                                                          "truth.json")))
# a loaded PyFunc cannot run (its Python callback is not saved): TensorFlow itself cannot tell there
UNRUNNABLE = {"numpy_function", "pyfunc_float", "unsafe_write_file"}


def _sample_names() -> list[str]:
    from sample_models.build import MODELS

    return sorted(set(MODELS) - UNRUNNABLE)


@pytest.mark.parametrize("name", _sample_names())
def test_sample_model_flow_agrees_with_gradient_tape(samples, name):
    path = os.path.join(samples, name)
    keys = SavedModelFile(path).signature_keys()
    truth = tape_truth(path, keys)
    checked = 0
    for key, pairs in truth.items():
        report = audit_saved_model(path, AuditOptions(static_only=True, signature=key))
        assert contradictions(report, pairs) == []
        checked += compared(report, pairs)
    assert checked or not any(truth.values()), f"{name}: no pair compared"


@pytest.mark.parametrize("folder", THIRDPARTY, ids=os.path.basename)
def test_thirdparty_flow_agrees_with_recorded_truth(folder):
    truth = recorded_truth(folder)
    assert truth, f"{folder}: truth.json records no pairs"
    checked = 0
    for key, pairs in truth.items():
        report = audit_saved_model(folder, AuditOptions(static_only=True, signature=key))
        assert contradictions(report, pairs) == []
        checked += compared(report, pairs)
    assert checked, f"{folder}: no pair decided by the truth"
