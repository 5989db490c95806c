"""A runtime stage that runs out of memory (numpy's MemoryError under the child's memory limit, as a 350M-parameter
model's checks do) stops the audit as incomplete, saying so: never an internal error of gradaudit, never a pass."""

from __future__ import annotations

import os

import gradaudit.runtime
from gradaudit.api import AuditOptions, audit_saved_model


def test_running_out_of_memory_makes_the_audit_incomplete_not_an_internal_error(samples, monkeypatch):
    def exhausted(*_args, **_kwargs):
        raise MemoryError("Unable to allocate 32.0 MiB for an array with shape (8388608,) and data type float32")

    monkeypatch.setattr(gradaudit.runtime, "_probes", exhausted)
    report = audit_saved_model(os.path.join(samples, "mlp"), AuditOptions())
    assert report.verdict("error") == "incomplete"
    assert any("ran out of memory" in line and "--memory-limit" in line for line in report.incomplete)
    assert report.numeric and not report.stability  # the numeric checks ran; the probes and what follows did not
