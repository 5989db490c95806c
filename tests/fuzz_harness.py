"""Structured mutations of real saved_model.pb files, audited statically, each `pass` checked against TensorFlow:
does TensorFlow itself load the mutated model? A pass on a graph TensorFlow refuses is a false pass.

    python tests/fuzz_harness.py SAMPLES_DIR [N] [SEED] [--ask-rejected]

prints the counts (mutations, exit 0 passes, passes TensorFlow rejects) and the rejected passes' kinds; with
--ask-rejected, also whether TensorFlow loads the graphs gradaudit refuses as ones it would reject."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from test_fuzz import BASES, STRUCTURED, mutate_structure  # noqa: E402

# loads each model named on stdin in one long-lived TensorFlow process; one JSON line per model
_WORKER = r"""
import json, os, sys
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import tensorflow as tf

def why(exc):
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]

for line in sys.stdin:
    path = line.strip()
    answer = {"ok": True, "graph_ok": True}
    try:
        tf.saved_model.load(path)
    except Exception as exc:
        answer.update(ok=False, error=why(exc))
    try:  # the graph's own nodes, as TF1 sessions and the C++ loader (TF Serving) import them
        with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
            tf.compat.v1.saved_model.loader.load(sess, ["serve"], path)
    except Exception as exc:
        answer.update(graph_ok=False, graph_error=why(exc))
    print(json.dumps(answer), flush=True)
"""


class TensorFlowOracle:
    """Whether TensorFlow loads a SavedModel (`tf.saved_model.load`), asked of a worker process that is
    restarted when a model crashes it (a crash is a rejection)."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None

    def _start(self) -> subprocess.Popen:
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
        return subprocess.Popen([sys.executable, "-c", _WORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True, env=env)

    def loads(self, path: str) -> dict:
        """{"ok": tf.saved_model.load loads it, "error": why not, "graph_ok": a TF1 session loads its graph,
        "graph_error": why not}."""
        if self.proc is None or self.proc.poll() is not None:
            self.proc = self._start()
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(path + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            code = self.proc.wait()
            self.proc = None
            crash = f"TensorFlow crashed loading it (exit {code})"
            return {"ok": False, "error": crash, "graph_ok": False, "graph_error": crash}
        return json.loads(line)

    def close(self) -> None:
        if self.proc is not None:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
            self.proc.wait(timeout=60)
            self.proc = None


@dataclass
class Outcome:
    base: str
    kind: str
    a: int
    b: int
    verdict: str  # pass / fail / incomplete / error (GradauditError: exit 2)
    message: str = ""
    tf_ok: bool | None = None  # asked only for passes
    tf_error: str = ""
    graph_ok: bool | None = None  # a TF1 session (as TF Serving) loads the graph's own nodes
    graph_error: str = ""


def mutations(n: int, seed: int) -> list[tuple[str, str, int, int]]:
    rng = random.Random(seed)
    return [(rng.choice(BASES), rng.choice(STRUCTURED), rng.randrange(2**31), rng.randrange(2**31))
            for _ in range(n)]


def run(samples: str, n: int = 300, seed: int = 0, workdir: str | None = None,
        oracle: TensorFlowOracle | None = None, ask_rejected: bool = False) -> list[Outcome]:
    from gradaudit.api import AuditOptions, audit_saved_model
    from gradaudit.errors import GradauditError

    originals = {}
    for name in BASES:
        with open(os.path.join(samples, name, "saved_model.pb"), "rb") as f:
            originals[name] = f.read()
    own = workdir is None
    workdir = workdir or tempfile.mkdtemp(prefix="gradaudit-fuzz-")
    oracle_own = oracle is None
    oracle = oracle or TensorFlowOracle()
    out = []
    try:
        for i, (base, kind, a, b) in enumerate(mutations(n, seed)):
            path = os.path.join(workdir, f"m{i:04d}")
            shutil.copytree(os.path.join(samples, base), path)
            with open(os.path.join(path, "saved_model.pb"), "wb") as f:
                f.write(mutate_structure(originals[base], kind, a, b))
            try:
                report = audit_saved_model(path, AuditOptions(static_only=True))
            except GradauditError as exc:
                outcome = Outcome(base, kind, a, b, "error", str(exc))
            else:
                outcome = Outcome(base, kind, a, b, report.verdict())
            if outcome.verdict == "pass" or (ask_rejected and "TensorFlow would reject" in outcome.message):
                answer = oracle.loads(path)
                outcome.tf_ok, outcome.tf_error = answer["ok"], answer.get("error", "")
                outcome.graph_ok, outcome.graph_error = answer["graph_ok"], answer.get("graph_error", "")
            out.append(outcome)
            shutil.rmtree(path)
    finally:
        if oracle_own:
            oracle.close()
        if own:
            shutil.rmtree(workdir, ignore_errors=True)
    return out


def summary(outcomes: list[Outcome]) -> str:
    passes = [o for o in outcomes if o.verdict == "pass"]
    false = [o for o in passes if not o.tf_ok]
    either = [o for o in passes if not (o.tf_ok and o.graph_ok)]
    lines = [f"{len(outcomes)} mutations: {Counter(o.verdict for o in outcomes)}",
             f"{len(passes)} exit-0 passes, {len(false)} of them on graphs tf.saved_model.load rejects, "
             f"{len(either)} on graphs it or a TF1 session (TF Serving's loader) rejects",
             f"false passes by mutation: {Counter(o.kind for o in false)}"]
    lines += [f"  {o.base} {o.kind} a={o.a} b={o.b}: {o.tf_error}" for o in false]
    lines += [f"  {o.base} {o.kind} a={o.a} b={o.b}: TF1 session: {o.graph_error}" for o in either if o.tf_ok]
    refused = [o for o in outcomes if "TensorFlow would reject" in o.message]
    asked = [o for o in refused if o.tf_ok is not None]
    if asked:
        wrong = [o for o in asked if o.tf_ok]
        both = [o for o in asked if o.tf_ok and o.graph_ok]
        lines.append(f"{len(refused)} refused as graphs TensorFlow would reject; tf.saved_model.load loads "
                     f"{len(wrong)} of them, and a TF1 session too {len(both)}")
        lines += [f"  {o.base} {o.kind} a={o.a} b={o.b}: {o.message}" for o in both]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(HERE))
    print(summary(run(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 300,
                      int(sys.argv[3]) if len(sys.argv) > 3 else 0, ask_rejected="--ask-rejected" in sys.argv)))
