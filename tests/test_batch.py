"""Several models in one run with --jobs: this process and worker processes share the models; results come
in the order asked; a worker that dies fails its model, not the run; no worker outlives the run."""

from __future__ import annotations

import multiprocessing
import os

import pytest

from gradaudit.api import AuditOptions
from gradaudit.batch import audit_models
from gradaudit.errors import GradauditError

# A Python target is imported by the process that audits it. This one waits (at most two minutes) until the
# other has been taken by a worker, so that which process audits which is decided, not raced.
_WAITS = """
import os, time
import tensorflow as tf

deadline = time.time() + 120
while not os.path.exists({flag!r}) and time.time() < deadline:
    time.sleep(0.1)


@tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x")])
def f(x):
    return {{"y": tf.reduce_sum(x * x, axis=1)}}
"""
# Dies in whichever worker imports it (as a model that crashes TensorFlow's kernels would).
_KILLS = """
import multiprocessing, os

if multiprocessing.parent_process() is not None:
    open({flag!r}, "w").close()
    os._exit(3)
f = None
"""

# Fails to import in whichever worker imports it.
_RAISES = """
import multiprocessing

if multiprocessing.parent_process() is not None:
    open({flag!r}, "w").close()
    raise ValueError("worker-only failure")
f = None
"""


def _pair(tmp_path, second: str):
    """Two Python targets sharing a flag file: the first waits until a worker has imported the second
    (`_KILLS` or `_RAISES`), which sets the flag and then fails in that worker."""
    flag = str(tmp_path / "taken")
    first, other = tmp_path / "waits.py", tmp_path / "second.py"
    first.write_text(_WAITS.format(flag=flag))
    other.write_text(second.format(flag=flag))
    return first, other


@pytest.mark.slow
def test_a_worker_that_dies_fails_its_model_and_the_others_are_audited(tmp_path):
    waits, kills = _pair(tmp_path, _KILLS)
    done = []
    audits = audit_models([f"{waits}:f", f"{kills}:f"], AuditOptions(static_only=True), jobs=2, on_done=done.append)
    assert [a.path for a in audits] == [f"{waits}:f", f"{kills}:f"]  # the order asked, not the order finished
    assert audits[0].failure is None and audits[0].reports[0].verdict() == "pass"
    assert audits[1].failure is not None and not audits[1].reports
    assert "worker process" in audits[1].failure.error and "exit code 3" in audits[1].failure.error
    assert sorted(a.path for a in done) == sorted(a.path for a in audits)  # each reported once as it finished
    assert multiprocessing.active_children() == []  # no worker outlives the run


@pytest.mark.slow
def test_more_jobs_than_models_gives_each_model_once_in_order(samples):
    paths = [os.path.join(samples, name) for name in ("classifier_argmax", "mlp", "stop_gradient")]
    audits = audit_models(paths, AuditOptions(static_only=True), jobs=8)
    assert [a.path for a in audits] == paths
    assert [a.reports[0].verdict() for a in audits] == [
        r.verdict() for a in audit_models(paths, AuditOptions(static_only=True), jobs=1) for r in a.reports]
    assert [a.reports[0].target.path for a in audits] == paths
    assert multiprocessing.active_children() == []


@pytest.mark.slow
def test_with_debug_a_workers_exception_is_raised_here_with_its_traceback(tmp_path):
    waits, raises = _pair(tmp_path, _RAISES)
    with pytest.raises(GradauditError, match="worker-only failure") as raised:
        audit_models([f"{waits}:f", f"{raises}:f"], AuditOptions(static_only=True), jobs=2, debug=True)
    assert "Traceback" in str(raised.value.__cause__) and "raise GradauditError" in str(raised.value.__cause__)
    assert multiprocessing.active_children() == []
