"""One audit reads the model once: gradaudit parses saved_model.pb once (the static pass, whose result the
child that runs the model receives) and TensorFlow's loader reads it once in that child; the child does not
parse it or analyse it again. Counted with strace over the whole process tree."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace")]


def _opens(trace: str, path: str) -> list[str]:
    with open(trace) as f:
        return [line for line in f if f'"{path}"' in line and "openat(" in line and "= -1" not in line]


@pytest.mark.parametrize("flags", [[], ["--all-signatures"]])
def test_the_graph_is_parsed_once_and_loaded_once_per_signature(samples, tmp_path, flags):
    model = os.path.join(samples, "mlp")
    trace = str(tmp_path / "trace")
    result = subprocess.run(["strace", "-f", "-qq", "-e", "trace=openat", "-o", trace, sys.executable, "-m",
                             "gradaudit", model, "--format", "json", *flags], capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    assert '"status": "pass"' in result.stdout  # the numeric checks ran, in the child
    audited = len(json.loads(result.stdout).get("reports", [None]))
    assert audited == (2 if flags else 1)
    opens = _opens(trace, os.path.join(model, "saved_model.pb"))
    pids = {line.split()[0] for line in opens}
    # the parent's one parse, and the TensorFlow loader of the child that runs each signature
    assert len(opens) == 1 + audited and len(pids) == 1 + audited, opens


def _counting(monkeypatch, module, name: str) -> list[int]:
    calls: list[int] = []
    real = getattr(module, name)

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return calls


@pytest.mark.parametrize("timeout", [None, 60.0])
def test_the_static_analysis_and_its_hazards_are_made_once_per_audit(samples, monkeypatch, timeout):
    """In this process, and on the child's code path (its job pickled and its result sent as JSON, as isolate.py
    does, run here so that the calls can be counted): the flow analysis and the hazard search run once, in the
    parent; the child receives them with the StaticResult. A sample whose probes judge its hazard lint."""
    import gradaudit.flow
    import gradaudit.static.hazards
    from gradaudit.api import AuditOptions, audit_saved_model

    if timeout:  # the child's side in this process: the job pickled as isolate.py sends it, its result as data
        import json as _json
        import pickle

        from gradaudit.model import Isolation

        def as_child(fn, args, *_rest):
            sent = fn(*pickle.loads(pickle.dumps(args)))
            return _json.loads(_json.dumps(sent)), Isolation(None, None, None, timeout)

        monkeypatch.setattr("gradaudit.isolate.run_isolated", as_child)
    analyses = _counting(monkeypatch, gradaudit.flow, "analyse")
    hazards = _counting(monkeypatch, gradaudit.static.hazards, "find_hazards")
    report = audit_saved_model(os.path.join(samples, "log1pexp_naive"), AuditOptions(timeout=timeout))
    assert report.stability and any(f.confirmed_by for f in report.findings)  # the probes ran and judged
    assert len(analyses) == 1 and len(hazards) == 1


def test_a_traced_target_is_analysed_once_and_named_as_traced(monkeypatch):
    """A Python or Keras target is audited as the SavedModel it saves to: one flow analysis and one hazard search
    (not one on the traced graph and another on a saved copy), its outputs under the Keras model's own names."""
    import keras

    import gradaudit.flow
    import gradaudit.static.hazards
    from gradaudit.api import AuditOptions, audit_object

    analyses = _counting(monkeypatch, gradaudit.flow, "analyse")
    hazards = _counting(monkeypatch, gradaudit.static.hazards, "find_hazards")
    inp = keras.Input((3,), name="feat")
    hidden = keras.layers.Dense(4, name="d")(inp)
    model = keras.Model(inp, [keras.layers.Dense(2, name="head")(hidden), keras.layers.Softmax(name="sm")(hidden)])
    report = audit_object(model, AuditOptions(), kind="keras")
    assert {o.name for o in report.outputs} == {"head", "sm"} and report.target.kind == "keras"
    assert report.numeric and {n.status for n in report.numeric if n.scale is None} == {"pass"}
    assert {s.output for s in report.stability} <= {"head", "sm", "*"}
    assert len(analyses) == 1 and len(hazards) == 1
