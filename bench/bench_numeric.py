"""Cost and power of gradaudit's numeric checks, measured in one run.

1. Keras ResNet50 (weights=None) exported with `model.export`: the floor (a fresh process that imports
   TensorFlow, loads the model and runs one forward and backward pass) against `run_numeric` with default
   options (a fresh process, import and load included). Issue 3's target: ratio <= 2.
2. A small model with seed 001's custom log1pexp, correct and wrong by 1e-4 and 1e-6: the verdicts and
   time of `run_numeric` against `tf.test.compute_gradient` with its default step, in float32.

3. Sensitivity and false failures over seeds (--seeds N): whole default audits (numeric checks, probes
   and their probe-point checks) of healthy and broken models, one audit per seed; a false failure is a
   gradient-mismatch or float32-gradient error on a healthy model, sensitivity the share of seeds that fail a
   broken one.
4. What --precision adds to a default audit (--precision): in a fresh process per model, a default audit then
   the same with --precision float16, the model evaluations of each stage counted (gradient passes and the
   rows they carry, a run of the frozen graph that fetches gradients counted as a gradient pass, line
   evaluations, the other runs of the frozen graph, the loaded signature called eagerly: a plain forward
   pass) and the stages timed. Sample models, and a
   Keras MobileNetV2 (weights=None, 96x96, 3.5M parameters) exported with model.export.

5. The whole default audit against its floor (--whole-audit for ResNet50, --mlp for sample_models/mlp,
   --lm 110m|350m for the GPT-style Keras LM of bench/lm.py; whole_audit.py): paired runs of the floor and of
   `python -m gradaudit MODEL --format json`, wall time and with --rss the peak RSS of each run's whole process
   tree (proctree.py), then one in-process audit's phases; evaluations per precision from both reports.

    python bench/bench_numeric.py [--repeat N] [--json FILE] [--whole-audit] [--skip-resnet] [--seeds N]
                                  [--precision] [--mlp] [--lm 110m] [--untied] [--rss] [--in-process]
                                  [--skip-phases]

Each process is timed from the parent, so interpreter start-up counts on both sides; with --repeat N the
fastest of N runs is kept on each side (the paired runs also report each pair).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from whole_audit import ENV, FLOOR, ROOT, load_average, measure_model, print_summary

EXPORT = """
import sys, keras
keras.utils.set_random_seed(0)  # weights=None draws the initial weights: the same model in every run
keras.applications.ResNet50(weights=None).export(sys.argv[1], verbose=False)
"""

NUMERIC = """
import json, sys
from gradaudit.numeric import NumericOptions, NumericTask, run_numeric
from gradaudit.numeric.savedmodel import declared_sources
path, options = sys.argv[1], json.loads(sys.argv[2])
sources, outputs = declared_sources(path)
outcome = run_numeric(path, (), "serving_default", NumericTask(sources, outputs, [], NumericOptions(**options)))
print(json.dumps({"results": [r.to_dict() for r in outcome.results],
                  "findings": [f.to_dict()["rule"] for f in outcome.findings],
                  "notes": outcome.notes}))
"""

BUILD_SMALL = """
import sys, builders
for err in (0.0, 1e-4, 1e-6):
    builders.custom_mlp(f"{sys.argv[1]}/err_{err:g}", err)
"""

# tf.test.compute_gradient differentiates with respect to its arguments only, so it checks the input x
# (a loaded model's captured variables cannot be substituted differentiably).
COMPUTE_GRADIENT = """
import json, sys, time, numpy as np, tensorflow as tf
fn = (m := tf.saved_model.load(sys.argv[1])).signatures["serving_default"]
x0 = tf.constant(np.random.default_rng(0).standard_normal((2, 4)), tf.float32)
start = time.perf_counter()
(theoretical,), (numerical,) = tf.test.compute_gradient(lambda x: fn(x=x)["y"], [x0])
seconds = time.perf_counter() - start
error = float(np.max(np.abs(theoretical - numerical)))
print(json.dumps({"max_abs_error": error, "max_rel_error": error / float(np.max(np.abs(theoretical))),
                  "seconds": seconds}))
"""


BUILD_SEEDED = """
import sys, builders
out = sys.argv[1]
builders.custom_mlp(f"{out}/healthy_custom_mlp", 0.0)
builders.wrong_above_two(f"{out}/healthy_softplus_custom", 1.0)
builders.keras_text(f"{out}/healthy_text_masked", True)
builders.keras_text(f"{out}/healthy_text", False)
builders.softmax_xent(f"{out}/healthy_softmax_xent")
builders.keras_cnn(f"{out}/healthy_keras_cnn")
builders.custom_mlp(f"{out}/broken_custom_mlp_1e-4", 1e-4)
builders.custom_mlp(f"{out}/broken_custom_mlp_1e-6", 1e-6)
builders.wrong_above_two(f"{out}/broken_wrong_above_two", 0.5)
"""

SEEDED = """
import json, sys, time
from gradaudit import audit
for path in sys.argv[2:]:
    for seed in range(int(sys.argv[1])):
        start = time.perf_counter()
        r = audit(path, seed=seed)
        print(json.dumps({"model": path, "seed": seed, "seconds": time.perf_counter() - start,
                          "verdict": r.verdict(),
                          "mismatch": any(f.rule in ("gradient-mismatch", "float32-gradient")
                                          and f.severity.value == "error" for f in r.findings),
                          "statuses": sorted({n.status for n in r.numeric})}), flush=True)
"""


def seeded(tmp: str, seeds: int) -> dict:
    print(f"sensitivity and false failures over {seeds} seeds ...", file=sys.stderr)
    timed(BUILD_SEEDED, tmp)
    paths = sorted(str(p) for p in Path(tmp).iterdir() if p.name.startswith(("healthy_", "broken_")))
    thirdparty = ROOT / "sample_models" / "thirdparty"
    paths += [str(thirdparty / n) for n in ("jax_custom_vjp_ok", "jax_custom_vjp_wrong", "jax_custom_vjp_wrong_x_gt_2")
              if (thirdparty / n / "saved_model.pb").exists()]
    command = [sys.executable, "-c", SEEDED, str(seeds), *paths]
    done = subprocess.run(command, env=ENV, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"subprocess failed:\n{done.stderr[-3000:]}")
    rows: dict[str, dict] = {}
    for line in done.stdout.splitlines():
        if not line.startswith("{"):
            continue
        item = json.loads(line)
        name = Path(item["model"]).name
        row = rows.setdefault(name, {"healthy": not ("broken" in name or "wrong" in name), "seeds": 0,
                                     "mismatch": 0, "fail": 0, "seconds": 0.0, "statuses": set()})
        row["seeds"] += 1
        row["mismatch"] += item["mismatch"]
        row["fail"] += item["verdict"] == "fail"
        row["seconds"] += item["seconds"]
        row["statuses"] |= set(item["statuses"])
    for row in rows.values():
        row["statuses"] = sorted(row["statuses"])
    return rows


# Both audits in one process: the counts do not depend on what is warm, the times of the second do (its
# traced functions cached), so the precision stage's time is read from the second audit's own phases.
PRECISION = """
import json, sys, time
from collections import Counter
from gradaudit.batch import import_tensorflow_quietly
import_tensorflow_quietly()
import numpy as np
from gradaudit.api import AuditOptions, audit_saved_model
from gradaudit.numeric.runner import Runner
from gradaudit.progress import observed
from gradaudit.numeric.forensics import Forensics
from gradaudit.numeric.precision import FrozenRuns
phase = ["read saved_model.pb"]
counts, times = Counter(), Counter()
def rows_of(runner):
    shapes = [np.shape(v) for v in runner.inputs.values() if np.ndim(v)]
    return int(shapes[0][0]) if shapes else 1
def counted(name, method, rows=None):
    def wrapper(self, *args, **kwargs):
        counts[phase[0], name] += 1
        if rows:
            counts[phase[0], name + " rows"] += rows(self)
        return method(self, *args, **kwargs)
    return wrapper
Runner.gradient = counted("gradient passes", Runner.gradient, rows_of)
Runner.evaluate = counted("line evaluations", Runner.evaluate)
# A run of the frozen graph that fetches gradients (--precision's, with every float tensor) is a gradient pass,
# counted as one and not again as a frozen-graph run; building its gradient ops is counted apart (no pass).
inside = [False]
def frozen_run(method):
    def wrapper(self, *args, **kwargs):
        if not inside[0]:
            counts[phase[0], "frozen-graph runs"] += 1
        return method(self, *args, **kwargs)
    return wrapper
def frozen_pass(method):
    def wrapper(self, feed, *args, **kwargs):
        counts[phase[0], "gradient passes"] += 1
        counts[phase[0], "gradient passes rows"] += next((int(np.shape(v)[0]) for v in feed.values() if np.ndim(v)), 1)
        counts[phase[0], "gradient passes in a frozen-graph run that fetches every float tensor"] += 1
        inside[0] = True
        try:
            return method(self, feed, *args, **kwargs)
        finally:
            inside[0] = False
    return wrapper
Forensics._run = frozen_run(Forensics._run)
Forensics._build = counted("graph freezes", Forensics._build)
FrozenRuns.values_and_gradients = frozen_pass(FrozenRuns.values_and_gradients)
FrozenRuns.with_gradients = counted("gradient graphs built in the frozen graph", FrozenRuns.with_gradients)
# The loaded signature called eagerly, outside any pass: a plain forward (--precision's, for its cotangent's shapes).
import tensorflow as tf
from tensorflow.python.eager.polymorphic_function.concrete_function import ConcreteFunction
from tensorflow.python.saved_model.load import _WrapperFunction
def plain_forward(method):
    def wrapper(self, *args, **kwargs):
        if isinstance(self, _WrapperFunction) and tf.executing_eagerly():
            counts[phase[0], "plain forward passes"] += 1
        return method(self, *args, **kwargs)
    return wrapper
ConcreteFunction.__call__ = plain_forward(ConcreteFunction.__call__)
mark = [time.perf_counter()]
def sink(message):
    now = time.perf_counter()
    times[phase[0]] += now - mark[0]
    mark[0] = now
    phase[0] = message.split(":")[0].split(" and ")[0]
out = {}
for label, kw in (("default", {}), ("float16", {"precision": "float16"})):
    counts.clear(); times.clear(); phase[0] = "read saved_model.pb"; mark[0] = time.perf_counter()
    with observed(sink):
        r = audit_saved_model(sys.argv[1], AuditOptions(timeout=None, **kw))
    times[phase[0]] += time.perf_counter() - mark[0]
    out[label] = {"counts": {f"{p} / {n}": c for (p, n), c in sorted(counts.items())},
                  "seconds": dict(times), "verdict": r.verdict(),
                  "precision_rows": len(r.precision),
                  "points": sorted({str(p.scale) for p in r.precision}),
                  "findings": sorted(f.code for f in r.findings if f.code.startswith("GA33"))}
print(json.dumps(out))
"""

EXPORT_MOBILENET = """
import sys, keras
m = keras.applications.MobileNetV2(weights=None, input_shape=(96, 96, 3))
print(m.count_params())
m.export(sys.argv[1], verbose=False)
"""


def precision_cost(tmp: str) -> dict:
    models = {n: str(ROOT / "sample_models" / n) for n in ("mlp", "ratio_naive", "cnn")}
    print("exporting MobileNetV2 ...", file=sys.stderr)
    path = os.path.join(tmp, "mobilenet_v2")
    _, params = timed(EXPORT_MOBILENET, path)
    models[f"MobileNetV2 96x96 ({int(params):,} parameters)"] = path
    report = {}
    for name, path in models.items():
        print(f"--precision cost: {name} ...", file=sys.stderr)
        report[name] = json.loads(timed(PRECISION, path, ok=(0, 1))[1])
    return report


def timed(script: str, *args: str, module: bool = False, ok: tuple[int, ...] = (0,)) -> tuple[float, str]:
    return timed_command([sys.executable, "-m" if module else "-c", script, *args], ok)


def timed_command(command: list[str], ok: tuple[int, ...] = (0,)) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(command, env=ENV, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode not in ok:
        raise SystemExit(f"subprocess failed:\n{done.stderr[-3000:]}")
    lines = done.stdout.strip().splitlines()
    return seconds, lines[-1] if lines else ""


def verdicts(stdout: str) -> dict:
    data = json.loads(stdout)
    return {"checks": {f"{r['source']}->{r['output']}": (r["status"], r["rel_error"], r["dtype"],
                                                       r["evaluations"]) for r in data["results"]},
            "findings": data["findings"], "notes": data["notes"]}


def resnet(tmp: str, repeat: int, whole: bool, rss: bool, with_phases: bool, in_process: bool = False) -> dict:
    model = os.path.join(tmp, "resnet50")
    print("exporting ResNet50 ...", file=sys.stderr)
    timed(EXPORT, model)
    numeric: list[float] = []
    last = [""]

    def run_numeric_once() -> dict:
        print("ResNet50: run_numeric ...", file=sys.stderr)
        seconds, last[0] = timed(NUMERIC, model, "{}")
        numeric.append(seconds)
        return {"numeric_s": seconds}

    if whole:  # floor, run_numeric, the default command line, `repeat` times; then the phases
        audit = measure_model(model, "ResNet50", repeat, rss, between=run_numeric_once, with_phases=with_phases,
                              in_process=in_process)
        floor = [p["floor"]["seconds"] for p in audit["pairs"]]
    else:
        audit, floor = None, []
        for i in range(repeat):
            print(f"ResNet50 run {i + 1}/{repeat}: floor ...", file=sys.stderr)
            floor.append(timed(FLOOR, model)[0])
            run_numeric_once()
    report = {"floor_s": min(floor), "numeric_s": min(numeric), "ratio": min(numeric) / min(floor),
              "all_floor_s": floor, "all_numeric_s": numeric, **verdicts(last[0])}
    if audit is not None:
        report |= {"whole_audit_s": audit["audit_s"], "whole_ratio": audit["ratio"], "whole": audit}
    return report


def language_model(tmp: str, size: str, repeat: int, rss: bool, tied: bool, with_phases: bool,
                   in_process: bool = False) -> dict:
    """The GPT-style LM of bench/lm.py at `size`, exported, then its floor against the default audit."""
    path = os.path.join(tmp, f"lm_{size}")
    print(f"exporting the {size} LM ...", file=sys.stderr)
    command = [sys.executable, str(ROOT / "bench" / "lm.py"), path, "--lm-size", size, *([] if tied else ["--untied"])]
    seconds, out = timed_command(command)
    info = json.loads(out) | {"export_s": seconds}
    print(f"{size} LM: {info['parameters']:,} parameters, signature {info['signature']}", file=sys.stderr)
    return {"model": info, **measure_model(path, f"LM {size}", repeat, rss, vocab=info["vocab"],
                                           with_phases=with_phases, in_process=in_process)}


def small(tmp: str) -> dict:
    print("small model: run_numeric vs tf.test.compute_gradient ...", file=sys.stderr)
    timed(BUILD_SMALL, tmp)
    rows = {}
    for err in (0.0, 1e-4, 1e-6):
        path = f"{tmp}/err_{err:g}"
        row = {}
        for label, options in (("float64 upcast (default)", {}), ("float32", {"upcast": False})):
            seconds, out = timed(NUMERIC, path, json.dumps(options))
            row[label] = {"process_s": seconds, **verdicts(out)}
        seconds, out = timed(COMPUTE_GRADIENT, path)
        cg = json.loads(out)
        # The threshold TensorFlow's own float32 gradient tests use.
        cg["verdict"] = "fail" if cg["max_abs_error"] > 1e-3 else "pass"
        row["tf.test.compute_gradient (x)"] = {"process_s": seconds, **cg}
        rows[f"custom gradient wrong by {err:g}"] = row
    return rows


def _commit() -> str:
    done = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip() or "?"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--skip-resnet", action="store_true")
    parser.add_argument("--seeds", type=int, default=0,
                        help="also measure sensitivity and false failures over this many seeds (whole audits)")
    parser.add_argument("--skip-small", action="store_true", help="skip the float64/float32/compute_gradient table")
    parser.add_argument("--precision", action="store_true",
                        help="also count and time what --precision float16 adds to a default audit")
    parser.add_argument("--whole-audit", action="store_true",
                        help="ResNet50: also the default `gradaudit MODEL --format json` against the floor, paired, "
                             "and the phases of one in-process audit")
    parser.add_argument("--lm", action="append", default=[], choices=["tiny", "110m", "350m"],
                        help="the GPT-style LM of bench/lm.py at this size (repeatable): floor against the default "
                             "audit, paired, and the phases")
    parser.add_argument("--untied", action="store_true", help="--lm: a separate LM head, not the tied embedding")
    parser.add_argument("--mlp", action="store_true", help="sample_models/mlp: floor against the default audit")
    parser.add_argument("--rss", action="store_true",
                        help="poll every paired run's process tree for its peak RSS (summed) and PSS")
    parser.add_argument("--in-process", action="store_true",
                        help="paired runs: also `gradaudit MODEL --format json --timeout 0` (no child) after each pair")
    parser.add_argument("--skip-phases", action="store_true",
                        help="no in-process audit for the phase table (it runs unconfined: no memory limit)")
    args = parser.parse_args()
    report: dict = {"argv": sys.argv, "commit": _commit(), "cpus": os.cpu_count(), "load_start": load_average(),
                    "started": time.strftime("%Y-%m-%d %H:%M:%S %z")}
    phases = not args.skip_phases
    with tempfile.TemporaryDirectory(prefix="gradaudit-bench-") as tmp:
        report["small"] = {} if args.skip_small else small(tmp)
        if args.seeds:
            report["seeds"] = seeded(tmp, args.seeds)
        if args.precision:
            report["precision"] = precision_cost(tmp)
        if args.mlp:
            report["mlp"] = measure_model(str(ROOT / "sample_models" / "mlp"), "sample_models/mlp", args.repeat,
                                          args.rss, with_phases=phases, in_process=args.in_process)
        for size in args.lm:
            report[f"lm_{size}"] = language_model(tmp, size, args.repeat, args.rss, not args.untied, phases,
                                                  args.in_process)
        if not args.skip_resnet:
            report["resnet50"] = resnet(tmp, args.repeat, args.whole_audit, args.rss, phases, args.in_process)
    report["load_end"] = load_average()
    print(f"load average at the start {report['load_start']}, at the end {report['load_end']} "
          f"({report['cpus']} cores); commit {report['commit']}")
    if "mlp" in report:
        print_summary("sample_models/mlp", report["mlp"])
    for size in args.lm:
        info = report[f"lm_{size}"]["model"]
        print_summary(f"LM {size} ({info['parameters']:,} parameters, {'tied' if info['tied'] else 'untied'} head, "
                      f"d_model {info['d_model']}, {info['layers']} layers, vocab {info['vocab']}, seq {info['seq']})",
                      report[f"lm_{size}"])
    if "resnet50" in report:
        r = report["resnet50"]
        print(f"ResNet50: floor {r['floor_s']:.1f} s, run_numeric {r['numeric_s']:.1f} s, "
              f"ratio {r['ratio']:.2f} (target <= 2)")
        for check, (status, rel, dtype, evals) in r["checks"].items():
            print(f"  {check}: {status} rel_error={rel} dtype={dtype} evaluations={evals}")
        if "whole" in r:
            print_summary("ResNet50, the default command line", r["whole"])
    for case, row in report["small"].items():
        print(case)
        for label, data in row.items():
            if "checks" in data:
                checks = ", ".join(f"{k} {v[0]} ({v[1]:.1e})" if v[1] is not None else f"{k} {v[0]}"
                                   for k, v in data["checks"].items())
                print(f"  {label:26s} {data['process_s']:5.1f} s  {checks}  findings={data['findings']}")
            else:
                print(f"  {label:26s} {data['process_s']:5.1f} s  ({data['seconds']:.2f} s in the call)  "
                      f"{data['verdict']}  max|J_autodiff - J_numeric| = {data['max_abs_error']:.2e} "
                      f"(relative {data['max_rel_error']:.1e})")
    if "seeds" in report:
        rows = report["seeds"]
        print(f"Over {args.seeds} seeds (whole default audits):")
        for name, row in sorted(rows.items(), key=lambda kv: (not kv[1]["healthy"], kv[0])):
            kind = "healthy" if row["healthy"] else "broken "
            print(f"  {kind} {name:32s} gradient-mismatch in {row['mismatch']}/{row['seeds']} seeds, verdict fail "
                  f"in {row['fail']}/{row['seeds']}, {row['seconds'] / row['seeds']:.1f} s/audit, "
                  f"numeric statuses {row['statuses']}")
        healthy = [r for r in rows.values() if r["healthy"]]
        broken = [r for r in rows.values() if not r["healthy"]]
        print(f"  false failures: {sum(r['mismatch'] for r in healthy)}/{sum(r['seeds'] for r in healthy)} healthy "
              f"audits; sensitivity: {sum(r['mismatch'] for r in broken)}/{sum(r['seeds'] for r in broken)} broken "
              "audits caught")
    for name, row in report.get("precision", {}).items():
        print(f"--precision float16 on {name}: points {row['float16']['points']}, GA33x {row['float16']['findings']}")
        for label in ("default", "float16"):
            data = row[label]
            print(f"  {label:8s} " + ", ".join(f"{k} {v}" for k, v in data["counts"].items()))
            print(f"  {'':8s} " + ", ".join(f"{k} {v:.2f} s" for k, v in data["seconds"].items()))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
