"""Speed of the static pass, measured in one run (never asserted in tests).

1. Keras ResNet50 (weights=None) exported with model.export: wall time of
   `gradaudit MODEL --static-only` against `saved_model_cli scan` on the same model, both as
   fresh processes (both pay for importing TensorFlow). Target: ratio <= 1.3.
2. Linearity: the in-process static pass on generated models of ~10k and ~100k ops.
   Target: the 100k-op model takes no more than ~12x the 10k-op one.

Usage: python bench/bench_static.py [--skip-resnet] [--repeat N]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def timed(cmd: list[str], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def export_resnet(path: str) -> None:
    import keras

    keras.utils.set_random_seed(0)
    keras.applications.ResNet50(weights=None).export(path, verbose=False)


def chain_model(path: str, n_blocks: int) -> None:
    """A model whose graph holds about 4 * n_blocks ops in one function."""
    import tensorflow as tf

    class Chain(tf.Module):
        def __init__(self):
            self.w = tf.Variable(tf.ones([8]), name="w")

        @tf.function(input_signature=[tf.TensorSpec([None, 8], tf.float32, name="x")])
        def __call__(self, x):
            h = x
            for _ in range(n_blocks):
                h = tf.tanh(h * self.w + 1.0)
            return {"y": h}

    m = Chain()
    tf.saved_model.save(m, path, signatures=m.__call__)


def count_ops(path: str) -> int:
    from tensorflow.core.protobuf import saved_model_pb2

    sm = saved_model_pb2.SavedModel()
    with open(os.path.join(path, "saved_model.pb"), "rb") as f:
        sm.ParseFromString(f.read())
    g = sm.meta_graphs[0].graph_def
    return len(g.node) + sum(len(f.node_def) for f in g.library.function)


def static_pass_seconds(path: str, repeat: int) -> float:
    from gradaudit.api import AuditOptions, audit_saved_model

    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        audit_saved_model(path, AuditOptions(static_only=True))
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--skip-resnet", action="store_true")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="gradaudit-bench-")
    try:
        if not args.skip_resnet:
            resnet = os.path.join(tmp, "resnet50")
            export_resnet(resnet)
            ga = timed([sys.executable, "-m", "gradaudit", resnet, "--static-only", "--format", "json",
                        "--output", os.devnull], args.repeat)
            scan = timed(["saved_model_cli", "scan", "--dir", resnet], args.repeat)
            print(f"ResNet50 ({count_ops(resnet)} ops): gradaudit --static-only {ga:.2f} s, "
                  f"saved_model_cli scan {scan:.2f} s, ratio {ga / scan:.2f} (target <= 1.3)")
            print(f"  static pass alone, in process: {static_pass_seconds(resnet, args.repeat):.3f} s")
        sizes = {}
        for blocks in (2_500, 25_000):
            path = os.path.join(tmp, f"chain{blocks}")
            chain_model(path, blocks)
            sizes[count_ops(path)] = static_pass_seconds(path, args.repeat)
        (small, t_small), (large, t_large) = sorted(sizes.items())
        print(f"linearity: {small} ops {t_small:.3f} s, {large} ops {t_large:.3f} s, ratio "
              f"{t_large / t_small:.1f} for {large / small:.1f}x the ops (target <= 12)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
