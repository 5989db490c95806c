"""The truth gradaudit's flow statuses are held against: what `tf.GradientTape` says on the loaded model.

`tape_truth` computes it here, on a SavedModel this TensorFlow can load; `recorded_truth` reads the
`truth.json` a third-party fixture's builder wrote with the same method in the environment where the model's
ops are known. Both give {signature or saved function: {(source, output): truth}} where truth is `nonzero`,
`zero`, `none` or `error: ...`.

A status contradicts the truth when gradaudit says `blocked` or `disconnected` while TensorFlow gives a
non-zero gradient, or `connected` while TensorFlow gives None (no path at all). `unknown` never contradicts,
an error from TensorFlow decides nothing about one pair (a function with one op that has no gradient raises for
every source), and a zero gradient may be a coincidence of the point (a dead ReLU), so it decides nothing either.
"""

from __future__ import annotations

import json
import os

import numpy as np

Truth = dict[str, dict[tuple[str, str], str]]


def _inputs(fn, rng) -> dict | None:
    import tensorflow as tf

    feed = {}
    for name, spec in fn.structured_input_signature[1].items():
        shape = [2 if d is None else d for d in spec.shape.as_list()] if spec.shape.rank is not None else [2]
        if spec.dtype.is_floating:
            feed[name] = tf.constant(rng.uniform(0.5, 1.5, shape), spec.dtype)  # inside every sample's domain
        elif spec.dtype.is_integer:
            feed[name] = tf.constant(rng.integers(0, 2, shape), spec.dtype)
        elif spec.dtype == tf.bool:
            feed[name] = tf.constant(rng.integers(0, 2, shape).astype(bool))
        else:
            return None  # strings: the fixture's builder records the truth with real text
    return feed


def _trainable_names(path: str, key: str) -> dict[int, str]:
    """Position among the signature function's captured inputs -> SavedVariable name of a trainable variable,
    read from the object graph (the names gradaudit reports), independently of gradaudit's reader."""
    from tensorflow.core.protobuf import saved_model_pb2

    sm = saved_model_pb2.SavedModel()
    with open(os.path.join(path, "saved_model.pb"), "rb") as f:
        sm.ParseFromString(f.read())
    og = sm.meta_graphs[0].object_graph_def
    sigs = next((c.node_id for c in og.nodes[0].children if c.local_name == "signatures"), None)
    if sigs is None:
        return {}
    node = next((og.nodes[c.node_id] for c in og.nodes[sigs].children if c.local_name == key), None)
    if node is None:
        return {}
    kind = node.WhichOneof("kind")
    name = (node.bare_concrete_function.concrete_function_name if kind == "bare_concrete_function"
            else node.function.concrete_functions[0])
    out = {}
    for i, b in enumerate(og.concrete_functions[name].bound_inputs):
        n = og.nodes[b]
        if n.WhichOneof("kind") == "variable" and n.variable.trainable:
            out[i] = n.variable.name
    return out


def tape_truth(path: str, keys: list[str]) -> Truth:
    """Truth for each signature key of the SavedModel at `path` (signatures with string inputs are left out),
    with the helper the third-party fixtures' builders use."""
    import tensorflow as tf

    from sample_models.thirdparty.truth import pair_truths

    obj = tf.saved_model.load(path)
    rng = np.random.default_rng(0)
    out: Truth = {}
    for key in keys:
        fn = obj.signatures[key]
        feed = _inputs(fn, rng)
        if feed is None:
            continue
        by_handle = {id(v.handle): v for v in fn.variables}
        variables = [(name, by_handle[id(fn.captured_inputs[i])]) for i, name in _trainable_names(path, key).items()
                     if i < len(fn.captured_inputs) and id(fn.captured_inputs[i]) in by_handle]
        rows = pair_truths(fn, {k: t.numpy() for k, t in feed.items()}, variables)  # the fixtures' own method
        out[key] = {(r["source"], r["output"]): r["truth"] for r in rows}
    return out


def recorded_truth(folder: str) -> Truth:
    """The truth.json of a third-party fixture, in either of its builders' layouts."""
    with open(os.path.join(folder, "truth.json"), encoding="utf-8") as f:
        doc = json.load(f)
    out: Truth = {}
    if isinstance(doc.get("signatures"), dict):  # {key: {"pairs": {source: {output: truth}}}}
        for key, sig in doc["signatures"].items():
            out[key] = {(s, o): t for s, outs in sig.get("pairs", {}).items() for o, t in outs.items()}
    for key, entry in (doc.get("entry_points") or {}).items():  # {key: {"pairs": [{source, output, truth}]}}
        out[key] = {(p["source"], p["output"]): p["truth"] for p in entry.get("pairs", [])}
    return out


def contradictions(report, truth: dict[tuple[str, str], str]) -> list[str]:
    """Pairs whose static status the truth contradicts (see the module docstring); and a report that passes a
    model TensorFlow refuses to differentiate."""
    bad = []
    refused = sorted({t for pair, t in truth.items() if t.startswith("error") and pair in
                      {(e.source, e.output) for e in report.flow}})
    if refused and report.verdict() == "pass":
        bad.append(f"gradaudit passes the model while tf.GradientTape raises {refused[0]}")
    for e in report.flow:
        t = truth.get((e.source, e.output))
        if t is None:
            continue
        if (e.status in ("blocked", "disconnected") and t == "nonzero") or (e.status == "connected" and t == "none"):
            bad.append(f"{e.source} -> {e.output}: gradaudit says {e.status}, tf.GradientTape says {t}")
    return bad


def compared(report, truth: dict[tuple[str, str], str]) -> int:
    """How many of the report's pairs the truth decides (so a test can see it compared something)."""
    decided = ("nonzero", "none", "error")
    return sum(1 for e in report.flow if truth.get((e.source, e.output), "").split(":")[0] in decided)
