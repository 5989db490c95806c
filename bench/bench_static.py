"""Speed of the static pass, measured in one run (never asserted in tests).

1. Keras ResNet50 (weights=None) exported with model.export: wall time of
   `gradaudit MODEL --static-only` against `saved_model_cli scan` on the same model, both as
   fresh processes (both pay for importing TensorFlow). Target: ratio <= 1.3.
2. Linearity: the in-process static pass on generated models of ~10k and ~100k ops.
   Target: the 100k-op model takes no more than ~12x the 10k-op one.
3. Hostile sizes (each function is analysed once, calls composed from summaries): 1,000 nested calls; a
   library of 40 functions where each calls the next twice (2^40 paths); a 1,000-op function called 1,000
   times in a chain (1M nodes if every call were inlined). Each reports the in-process static pass's time and
   the size of the composed graph against the inlined one. Target: seconds, with the right verdict.

Usage: python bench/bench_static.py [--skip-resnet] [--skip-linearity] [--repeat N]
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


def hostile_base(path: str, block_ops: int) -> None:
    """y = block(x), block a function of about `block_ops` ops ending in a Round (the verdict: blocked)."""
    import tensorflow as tf

    class Base(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="h")])
        def block(self, h):
            for _ in range(max(1, block_ops // 4)):
                h = tf.tanh(h * 1.5 + 1.0)
            return tf.round(h)

        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="x")])
        def __call__(self, x):
            return {"y": self.block(x)}

    m = Base()
    tf.saved_model.save(m, path, signatures=m.__call__)


def rewire(path: str, levels: int, calls: int) -> None:
    """Between the signature's function and `block`: `levels` functions, f_k(x) = the sum of `calls` calls of
    f_{k+1}(x) (calls > 1: calls**levels paths); or, with levels == 0, `calls` calls of block in a chain."""
    from tensorflow.core.protobuf import saved_model_pb2

    sm = saved_model_pb2.SavedModel()
    with open(os.path.join(path, "saved_model.pb"), "rb") as f:
        sm.ParseFromString(f.read())
    lib = sm.meta_graphs[0].graph_def.library
    block = next(f for f in lib.function if f.signature.name.startswith("__inference_block"))
    top = next(f for f in lib.function if f.signature.name.startswith("__inference___call__"))

    def call(f, name: str, arg: str, callee: str) -> str:
        node = f.node_def.add()
        node.name, node.op = name, "PartitionedCall"
        node.input.append(arg)
        node.attr["f"].func.name = callee
        node.attr["Tin"].list.type.append(1)
        node.attr["Tout"].list.type.append(1)
        return f"{name}:output:0"

    def replace_body(f, callee: str, n: int, chain: bool) -> None:
        del f.node_def[:]
        arg = f.signature.input_arg[0].name
        outs = []
        for c in range(n):
            outs.append(call(f, f"call{c}", outs[-1] if chain and outs else arg, callee))
        total = outs[-1] if chain else outs[0]
        for c, out in enumerate([] if chain else outs[1:]):
            add = f.node_def.add()
            add.name, add.op = f"sum{c}", "AddV2"
            add.input.extend([total, out])
            add.attr["T"].type = 1
            total = f"sum{c}:z:0"
        f.ret[f.signature.output_arg[0].name] = total

    names = [f"__inference_level_{k}" for k in range(levels)]
    for k, name in enumerate(names):
        f = lib.function.add()
        f.CopyFrom(top)
        f.signature.name = name
        replace_body(f, names[k + 1] if k + 1 < levels else block.signature.name, calls, chain=False)
    if levels:
        replace_body(top, names[0], 1, chain=True)
    else:
        replace_body(top, block.signature.name, calls, chain=True)
    with open(os.path.join(path, "saved_model.pb"), "wb") as f:
        f.write(sm.SerializeToString())


def hostile_sizes(tmp: str) -> None:
    from gradaudit.flow import analyse
    from gradaudit.graph.gradients import GradientOracle
    from gradaudit.targets.saved_model import SavedModelFile

    cases = [("1,000 nested calls", 1000, 1, 8), ("2^40 paths (40 levels, 2 calls each)", 40, 2, 8),
             ("1,000-op function called 1,000 times", 0, 1000, 1000)]
    for label, levels, calls, block_ops in cases:
        path = os.path.join(tmp, f"hostile{levels}_{calls}")
        hostile_base(path, block_ops)
        rewire(path, levels, calls)
        t = time.perf_counter()
        model = SavedModelFile(path)
        analysis = analyse(model, model.signature("serving_default"), GradientOracle())
        seconds = time.perf_counter() - t
        [entry] = analysis.flow
        paths = calls ** levels if levels else calls  # a chain of nested calls has one path
        print(f"{label}: static pass {seconds:.2f} s, verdict {entry.status} by "
              f"{[c.op.op_type for c in entry.blocked_by]}, composed graph {len(analysis.graph.dtype):,} nodes "
              f"(inlining every call: {paths:,} copies of the innermost function)")


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
    ap.add_argument("--skip-linearity", action="store_true")
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
        if not args.skip_linearity:
            sizes = {}
            for blocks in (2_500, 25_000):
                path = os.path.join(tmp, f"chain{blocks}")
                chain_model(path, blocks)
                sizes[count_ops(path)] = static_pass_seconds(path, args.repeat)
            (small, t_small), (large, t_large) = sorted(sizes.items())
            print(f"linearity: {small} ops {t_small:.3f} s, {large} ops {t_large:.3f} s, ratio "
                  f"{t_large / t_small:.1f} for {large / small:.1f}x the ops (target <= 12)")
        hostile_sizes(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
