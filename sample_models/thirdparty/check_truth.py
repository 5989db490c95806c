"""Re-derive the truth of fixtures in THIS environment and compare it with their truth.json::

    python3 sample_models/thirdparty/check_truth.py sample_models/thirdparty/<name> ...

Loads each SavedModel with the running TensorFlow (no third-party library imported), runs it on the
inputs recorded in truth.json and recomputes every first-order (and second-order) pair with _truth.py.
Prints one line per model; exits 1 if a model does not load or run, or a pair differs.
Only for fixtures written by _truth.py (``builder`` build_tfp/jax/tfmot/keras/tfkeras.py).
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _truth import signature_truth


def _rows(rows):
    return {(r["source"], r["output"]): r["truth"] for r in rows}


def check(path):
    with open(os.path.join(path, "truth.json"), encoding="utf-8") as f:
        doc = json.load(f)
    diffs = []
    for key, ep in doc["entry_points"].items():
        inputs = {k: np.asarray(v["value"], dtype=v["dtype"]).reshape(v["shape"])
                  for k, v in ep["inputs"].items()}
        got = signature_truth(path, key, inputs, second_order="second_order" in ep)
        for part in ("pairs", "second_order"):
            if part not in ep:
                continue
            want, have = _rows(ep[part]), _rows(got[part])
            for pair in sorted(set(want) | set(have)):
                w, h = want.get(pair), have.get(pair)
                # error messages may name function ids that change at every load: compare the type only
                if (w or "").split(":")[:2] != (h or "").split(":")[:2]:
                    diffs.append(f"{key} {part} {pair[0]} -> {pair[1]}: recorded {w!r}, here {h!r}")
    return doc, diffs


if __name__ == "__main__":
    import tensorflow as tf

    bad = 0
    for p in sys.argv[1:]:
        try:
            doc, diffs = check(p)
        except Exception as exc:
            print(f"{p}: FAILED to load or run: {type(exc).__name__}: {exc}")
            bad += 1
            continue
        n = sum(len(ep["pairs"]) for ep in doc["entry_points"].values())
        status = "same" if not diffs else f"{len(diffs)} difference(s)"
        print(f"{p}: {n} pairs, built with TF {doc['environment']['tensorflow']}, "
              f"checked with TF {tf.__version__}: {status}")
        for d in diffs:
            print("   ", d)
        bad += bool(diffs)
    sys.exit(1 if bad else 0)
