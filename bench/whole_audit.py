"""The whole default audit of one SavedModel against its floor: wall time, peak memory, phases, evaluations.

- The floor (FLOOR): a fresh process that imports TensorFlow, loads the model, and runs one forward and
  backward pass with respect to its float inputs and its trainable variables (for a token-id model the
  variables are the only sources); integer inputs get ids in [0, vocab).
- The audit: `python -m gradaudit MODEL --format json` as a subprocess with default options (the parent
  runs the static pass, a confined child the model).
- Paired: floor then audit, `pairs` times, in this one invocation; the ratio is audit / floor of each pair,
  and of the fastest of each side. Optionally a third arm, the same command with `--timeout 0` (the model in
  gradaudit's own process, no child): what the child costs. With `rss` every run is polled (proctree.py) for
  the peak RSS summed over its whole process tree, and the peak PSS.
- Phases (PHASES): one in-process audit (`audit_saved_model(path, AuditOptions())`, timeout None: no child)
  in a fresh process, each stage timed from its announcement (`progress.say`) to the next; reconcile and the
  model loads (`numeric.runner.load`, inside the stages) are timed by wrapping those functions here, and each
  `Runner.gradient` and `Runner.evaluate` call is logged with its time and the process's RSS after it.
- Evaluations per precision: the sum of `evaluations` by `dtype` over the report's numeric results, split into
  the model's own point (`scale` null) and the probe points (`scale` set), for the CLI's report and the
  in-process one.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import proctree

ROOT = Path(__file__).resolve().parents[1]
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3",
           PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT / "tests" / "numeric"),
                                       os.environ.get("PYTHONPATH", "")]))

FLOOR = """
import json, sys, time
t0 = time.perf_counter()
import numpy as np, tensorflow as tf
t1 = time.perf_counter()
fn = (m := tf.saved_model.load(sys.argv[1])).signatures["serving_default"]
t2 = time.perf_counter()
high = int(sys.argv[2]) if len(sys.argv) > 2 else 2
rng = np.random.default_rng(0)
def value(s):
    shape = [2] + s.shape.as_list()[1:]
    if s.dtype.is_integer:
        return tf.constant(rng.integers(0, high, size=shape), s.dtype)
    return tf.constant(rng.standard_normal(shape), s.dtype)
x = {k: value(s) for k, s in fn.structured_input_signature[1].items()}
floats = [v for v in x.values() if v.dtype.is_floating]
with tf.GradientTape() as tape:
    tape.watch(floats)
    out = fn(**x)
    y = tf.add_n([tf.reduce_sum(v * tf.constant(rng.standard_normal(v.shape), v.dtype)) for v in out.values()])
sources = floats + list(fn.trainable_variables)
grads = tape.gradient(y, sources)
nonzero = sum(float(tf.reduce_sum(g)) for g in grads if g is not None) != 0.0
t3 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "load_s": t2 - t1, "forward_backward_s": t3 - t2, "nonzero": nonzero,
                  "sources": len(sources), "source_elements": sum(int(np.prod(s.shape)) for s in sources)}))
"""

PHASES = """
import json, sys, time
t0 = time.perf_counter()
from gradaudit.batch import import_tensorflow_quietly
import_tensorflow_quietly()
import gradaudit.api as api
from gradaudit.api import AuditOptions, audit_saved_model
from gradaudit.progress import observed
import os, threading
PAGE = os.sysconf("SC_PAGE_SIZE")
def rss():
    with open("/proc/self/statm", "rb") as f:
        return int(f.read().split()[1]) * PAGE
stages, steps, loads = {"import TensorFlow": time.perf_counter() - t0}, {}, []
peaks = {"import TensorFlow": rss()}  # the process's peak RSS while each step ran (sampled every 25 ms)
mark = {"t": time.perf_counter(), "stage": "read saved_model.pb", "step": "read saved_model.pb", "peak": rss()}
def sample():
    while not done.wait(0.025):
        mark["peak"] = max(mark["peak"], rss())
done = threading.Event()
threading.Thread(target=sample, daemon=True).start()
def sink(message):
    now, peak = time.perf_counter(), max(mark["peak"], rss())
    stages[mark["stage"]] = stages.get(mark["stage"], 0.0) + now - mark["t"]
    steps[mark["step"]] = steps.get(mark["step"], 0.0) + now - mark["t"]
    peaks[mark["step"]] = max(peaks.get(mark["step"], 0), peak)
    mark.update(t=now, stage=message.split(":")[0], step=message, peak=rss())
_reconcile = api.reconcile
def reconcile(*args, **kwargs):
    sink("reconcile")
    return _reconcile(*args, **kwargs)
api.reconcile = reconcile
try:
    from gradaudit.numeric import runner
    _load = runner.load
    def load(*args, **kwargs):
        start = time.perf_counter()
        try:
            return _load(*args, **kwargs)
        finally:
            what = ("float64 copy" if (args[2] if len(args) > 2 else kwargs.get("float64")) else "model")
            what += " without cuts" if kwargs.get("without_cuts") else ""
            loads.append({"load": what, "seconds": time.perf_counter() - start, "during": mark["step"]})
    runner.load = load
except (ImportError, AttributeError):
    pass
calls = []  # each model evaluation of the numeric checks and probes: what, when, how long, RSS after
def logged(name, method):
    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return method(*args, **kwargs)
        finally:
            calls.append({"call": name, "at_s": start - t0, "seconds": time.perf_counter() - start,
                          "rss_after": rss(), "during": mark["step"]})
    return wrapper
try:
    from gradaudit.numeric.runner import Runner
    Runner.gradient = logged("gradient", Runner.gradient)
    Runner.evaluate = logged("evaluate", Runner.evaluate)
except (ImportError, AttributeError):
    pass
with observed(sink):
    r = audit_saved_model(sys.argv[1], AuditOptions())
sink("done")
done.set()
print(json.dumps({"stages": stages, "steps": steps, "peak_rss": peaks, "loads": loads, "calls": calls,
                  "total_s": time.perf_counter() - t0,
                  "verdict": r.verdict(), "numeric": [n.to_dict() for n in r.numeric]}))
"""


def cli_command(model: str) -> list[str]:
    return [sys.executable, "-m", "gradaudit", model, "--format", "json"]


def floor_command(model: str, vocab: int | None = None) -> list[str]:
    return [sys.executable, "-c", FLOOR, model, *([str(vocab)] if vocab else [])]


def run(command: list[str], rss: bool) -> proctree.Measured:
    """One run of `command`: wall time, and with `rss` the process tree's peak memory."""
    if rss:
        return proctree.measure(command, env=ENV)
    start = time.perf_counter()
    done = subprocess.run(command, env=ENV, capture_output=True, text=True)
    return proctree.Measured(command, time.perf_counter() - start, done.returncode, done.stdout, done.stderr)


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def evaluations(numeric: list[dict]) -> dict:
    """Evaluations by dtype over numeric results: at the model's own point, at the probe points, in all."""
    out: dict[str, dict] = {"own point": {}, "probe points": {}, "all": {}}
    for r in numeric:
        dtype = str(r.get("dtype"))
        where = "own point" if r.get("scale") is None else "probe points"
        for key in (where, "all"):
            out[key][dtype] = out[key].get(dtype, 0) + int(r.get("evaluations") or 0)
    out["checks"] = {"own point": sum(r.get("scale") is None for r in numeric),
                     "probe points": sum(r.get("scale") is not None for r in numeric)}
    return out


def _last_json(stdout: str) -> dict | None:
    for line in reversed(stdout.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    return None


def _report(stdout: str) -> dict | None:
    try:
        return json.loads(stdout)
    except json.JSONDecodeError:
        return None


def _audit_summary(m: proctree.Measured) -> dict:
    report = _report(m.stdout) or {}
    out = {**m.summary(), "load": load_average(), "verdict": report.get("verdict"),
           "evaluations": evaluations(report.get("numeric", [])), "incomplete": report.get("incomplete", []),
           "notes": report.get("notes", []), "isolation": report.get("isolation"),
           "summary": report.get("summary"),
           "findings": [f"{f.get('code')} {f.get('rule')} {f.get('severity')}" for f in report.get("findings", [])],
           "numeric": [{k: r.get(k) for k in ("source", "output", "status", "dtype", "evaluations", "scale")}
                       for r in report.get("numeric", [])]}
    if m.returncode not in (0, 1) or not report:
        out["stderr"] = m.stderr[-3000:]
    return out


def pairs(model: str, label: str, count: int, rss: bool, vocab: int | None = None, between=None,
          in_process: bool = False) -> dict:
    """`count` pairs of floor then default CLI audit (`between()`, if given, between the two; with `in_process`
    the CLI with --timeout 0 after them, in gradaudit's own process: what the confined child costs)."""
    rows = []
    for i in range(count):
        print(f"{label} pair {i + 1}/{count}: floor ... (load {load_average()})", file=sys.stderr)
        floor = run(floor_command(model, vocab), rss)
        if floor.returncode:
            raise SystemExit(f"floor failed:\n{floor.stderr[-3000:]}")
        row = {"floor": {**floor.summary(), "load": load_average(), **(_last_json(floor.stdout) or {})}}
        if between is not None:
            row["between"] = between()
        print(f"{label} pair {i + 1}/{count}: gradaudit MODEL --format json ... (load {load_average()})",
              file=sys.stderr)
        row["audit"] = _audit_summary(run(cli_command(model), rss))
        row["ratio"] = row["audit"]["seconds"] / row["floor"]["seconds"]
        if in_process:
            print(f"{label} pair {i + 1}/{count}: gradaudit MODEL --format json --timeout 0 ... "
                  f"(load {load_average()})", file=sys.stderr)
            row["in_process"] = _audit_summary(run([*cli_command(model), "--timeout", "0"], rss))
            row["in_process_ratio"] = row["in_process"]["seconds"] / row["floor"]["seconds"]
        if rss and row["floor"]["peak_rss_bytes"]:
            row["rss_ratio"] = row["audit"]["peak_rss_bytes"] / row["floor"]["peak_rss_bytes"]
        rows.append(row)
    floor_s = min(r["floor"]["seconds"] for r in rows)
    audit_s = min(r["audit"]["seconds"] for r in rows)
    out = {"pairs": rows, "floor_s": floor_s, "audit_s": audit_s, "ratio": audit_s / floor_s,
           "median_pair_ratio": statistics.median(r["ratio"] for r in rows)}
    if rss:
        floor_rss = min(r["floor"]["peak_rss_bytes"] for r in rows)
        audit_rss = min(r["audit"]["peak_rss_bytes"] for r in rows)
        out |= {"floor_rss_bytes": floor_rss, "audit_rss_bytes": audit_rss, "rss_ratio": audit_rss / floor_rss}
    return out


def phases(model: str, label: str) -> dict:
    print(f"{label}: one in-process audit, phase by phase ... (load {load_average()})", file=sys.stderr)
    load = load_average()
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", PHASES, model], env=ENV, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    data = _last_json(done.stdout) if done.returncode == 0 else None
    if data is None:
        return {"error": f"exit {done.returncode}: {done.stderr[-3000:]}", "load": load}
    numeric = data.pop("numeric")
    return {**data, "process_s": seconds, "load": load, "load_after": load_average(),
            "evaluations": evaluations(numeric)}


def measure_model(model: str, label: str, count: int, rss: bool, vocab: int | None = None, between=None,
                  with_phases: bool = True, in_process: bool = False) -> dict:
    out = pairs(model, label, count, rss, vocab, between, in_process)
    if with_phases:
        out["phases"] = phases(model, label)
    return out


def _gib(n: int | None) -> str:
    return proctree.gib(n) if n else "-"


def _evals(e: dict) -> str:
    parts = []
    for where in ("own point", "probe points"):
        by = e.get(where) or {}
        text = ", ".join(f"{d} {n}" for d, n in sorted(by.items())) or "none"
        parts.append(f"{where} ({e['checks'][where]} checks): {text}")
    return "; ".join(parts)


def print_summary(label: str, r: dict) -> None:
    print(f"{label}:")
    for i, p in enumerate(r["pairs"], 1):
        f, a = p["floor"], p["audit"]
        mem = (f"; peak tree RSS floor {_gib(f['peak_rss_bytes'])}, audit {_gib(a['peak_rss_bytes'])} "
               f"({p['rss_ratio']:.2f}x; PSS {_gib(f['peak_pss_bytes'])} / {_gib(a['peak_pss_bytes'])})"
               if "rss_ratio" in p else "")
        print(f"  pair {i}: floor {f['seconds']:.1f} s (load {f['load']}), audit {a['seconds']:.1f} s "
              f"(load {a['load']}), {p['ratio']:.2f}x{mem}; verdict {a['verdict']} (exit {a['returncode']})")
        if "in_process" in p:
            ip = p["in_process"]
            mem = f", peak tree RSS {_gib(ip['peak_rss_bytes'])}" if ip["peak_rss_bytes"] else ""
            print(f"    --timeout 0 (no child): {ip['seconds']:.1f} s (load {ip['load']}), {p['in_process_ratio']:.2f}x"
                  f"{mem}; verdict {ip['verdict']}")
        if "import_s" in f:
            print(f"    floor: import TensorFlow {f['import_s']:.1f} s, load {f['load_s']:.1f} s, forward and "
                  f"backward {f['forward_backward_s']:.1f} s, {f['sources']} sources, {f['source_elements']:,} "
                  "elements")
        big = max(a["processes"], key=lambda x: x["peak_rss"], default=None)
        if big is not None:
            print(f"    largest process of the audit: peak RSS {_gib(big['peak_rss'])}, peak data+stack address "
                  f"space {_gib(big['peak_data'])} ({big['name'][:60]!r})")
        if a.get("findings"):
            print(f"    findings: {a['findings']}")
        if a.get("incomplete"):
            print(f"    incomplete: {a['incomplete']}")
        if a.get("stderr"):
            print(f"    stderr: {a['stderr'][-400:]}")
        print(f"    evaluations (CLI report): {_evals(a['evaluations'])}")
    line = (f"  fastest: floor {r['floor_s']:.1f} s, audit {r['audit_s']:.1f} s, ratio {r['ratio']:.2f} (median of the "
            f"pairs' ratios {r['median_pair_ratio']:.2f})")
    if "rss_ratio" in r:
        line += (f"; smallest peak tree RSS floor {_gib(r['floor_rss_bytes'])}, audit {_gib(r['audit_rss_bytes'])}, "
                 f"ratio {r['rss_ratio']:.2f}")
    print(line)
    ph = r.get("phases")
    if ph is None:
        return
    if "error" in ph:
        print(f"  phases: the in-process audit failed: {ph['error'][-400:]}")
        return
    print(f"  phases of one in-process audit ({ph['total_s']:.1f} s in the process, {ph['process_s']:.1f} s wall; "
          f"load {ph['load']} -> {ph['load_after']}; verdict {ph['verdict']}):")
    peaks = ph.get("peak_rss", {})
    print(f"    {'stage / step':66s} {'seconds':>9s}  peak RSS of the process during it")
    for stage, seconds in ph["stages"].items():
        peak = max((v for k, v in peaks.items() if k.split(":")[0] == stage), default=None)
        print(f"    {stage:66s} {seconds:7.2f} s  {_gib(peak)}")
        inner = {k: v for k, v in ph["steps"].items() if k.split(":")[0] == stage and k != stage}
        for step, s in inner.items():
            print(f"      {step.split(':', 1)[1].strip()[:62]:64s} {s:7.2f} s  {_gib(peaks.get(step))}")
    for item in ph["loads"]:
        print(f"    (load of the {item['load']}: {item['seconds']:.2f} s, during {item['during']!r})")
    for step in dict.fromkeys(c["during"] for c in ph.get("calls", [])):
        mine = [c for c in ph["calls"] if c["during"] == step]
        text = ", ".join(f"{c['call'][0]} {c['seconds']:.2f} s -> {c['rss_after'] / (1 << 30):.2f}" for c in mine[:12])
        more = f", ... ({len(mine)} in all)" if len(mine) > 12 else ""
        print(f"    calls during {step!r} (g: Runner.gradient, e: Runner.evaluate; seconds -> RSS GiB after): "
              f"{text}{more}")
    print(f"    evaluations (in-process report): {_evals(ph['evaluations'])}")
