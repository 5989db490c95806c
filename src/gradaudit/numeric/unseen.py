"""Whether a source the static pass finds no path from moves an output all the same.

The static pass follows data edges. A value can reach an output in ways it does not see (written into a variable in
one function and read back in another, in a loop's or a branch's body), and TensorFlow's gradient does not follow
those either: the tape gives None, and a "disconnected" pair would pass unchecked. So each source with a
disconnected float output is moved once, at the checked point, with every variable of the model put back after each
call (so that a model's own state, a cache or a counter, cannot move the outputs instead): an output that the same
point gives again bit for bit and the moved point changes depends on the source. That is a missing gradient
(GA204), with the change as its evidence; an output that the same point does not give again decides nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..model import ALL_VARIABLES, CheckedOutputs, Finding, NumericResult
from ..rules import numeric as rules

STEP = 1e-2  # relative: the source moves by about a hundredth of its own magnitude


@dataclass(frozen=True)
class Moved:
    """One source moved at the point: the outputs it changed (the largest change relative to the output's
    size), or why nothing could be told."""

    source: str
    outputs: tuple[str, ...]
    change: float
    undecided: str | None = None


class _Calls:
    """The model called at inputs, with its variables put back after each call."""

    def __init__(self, call: Callable[..., dict[str, Any]], specs: dict[str, Any], state: list[Any]):
        self.call, self.specs, self.state = call, specs, state

    def __call__(self, inputs: dict[str, np.ndarray], outputs: list[str],
                 moved: list[tuple[Any, np.ndarray]] | None = None) -> dict[str, np.ndarray]:
        """The outputs at `inputs`, with each (variable, value) of `moved` assigned for the call."""
        import tensorflow as tf

        moved = moved or []
        state = self.state + [v for v, _ in moved if all(v is not w for w in self.state)]
        kept = [v.read_value() for v in state]
        try:
            for v, value in moved:
                v.assign(value)
            out = self.call(**{k: tf.constant(inputs[k], self.specs[k].dtype) for k in self.specs})
            return {o: np.asarray(out[o], np.float64) for o in outputs}
        finally:
            for v, k in zip(state, kept):
                v.assign(k)


def _moved(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """x moved by about STEP of its magnitude (of the typical magnitude where it is zero)."""
    typical = float(np.median(np.abs(x))) if x.size else 0.0
    scale = np.abs(x) + (typical if typical > 0 else 1.0)
    return (x + STEP * scale * rng.choice([-1.0, 1.0], size=x.shape)).astype(x.dtype)


def _changed(base: dict[str, np.ndarray], again: dict[str, np.ndarray], moved: dict[str, np.ndarray]
             ) -> tuple[tuple[str, ...], float, list[str]]:
    """(outputs the move changed, the largest relative change, outputs the same point did not give again)."""
    changed, unsteady, largest = [], [], 0.0
    for o, y in base.items():
        if not (np.array_equal(y, again[o], equal_nan=True)):
            unsteady.append(o)
            continue
        if np.array_equal(y, moved[o], equal_nan=True):
            continue
        finite = np.isfinite(y) & np.isfinite(moved[o])
        size = float(np.max(np.abs(y[finite]), initial=0.0)) or 1.0
        largest = max(largest, float(np.max(np.abs(moved[o][finite] - y[finite]), initial=0.0)) / size)
        changed.append(o)
    return tuple(changed), largest, unsteady


ONE_BY_ONE = 8  # disconnected variables moved one by one (to name them) when moving them together moved an output


def _one(calls: _Calls, point: dict[str, np.ndarray], outputs: list[str],
         moves: tuple[dict[str, np.ndarray], list[tuple[Any, np.ndarray]]], source: str) -> Moved:
    """What moving `moves` (input name -> value, and (variable, value) pairs) does to `outputs`, as `source`."""
    base = calls(point, outputs)
    moved = calls({**point, **moves[0]}, outputs, moves[1])
    again = calls(point, outputs)
    changed, change, unsteady = _changed(base, again, moved)
    undecided = (f"the same point gives {', '.join(unsteady)} differently from one call to the next"
                 if unsteady and not changed else None)
    return Moved(source, changed, change, undecided)


def sources_moved(calls: _Calls, point: dict[str, np.ndarray], disconnected: dict[str, list[str]],
                  variables: dict[str, Any], rng: np.random.Generator) -> list[Moved]:
    """For each input source and its disconnected float outputs: what moving it alone does to them; the variables
    moved together first (one forward for them all), then, if that moved an output, one by one (up to ONE_BY_ONE)."""
    found = [_one(calls, point, outs, ({s: _moved(np.asarray(point[s]), rng)}, []), s)
             for s, outs in disconnected.items() if s in point]
    names = [s for s in disconnected if s not in point]
    if not names:
        return found
    outputs = sorted({o for s in names for o in disconnected[s]})
    value = {s: _moved(np.asarray(variables[s].read_value()), rng) for s in names}
    together = _one(calls, point, outputs, ({}, [(variables[s], value[s]) for s in names]), ", ".join(names))
    if not together.outputs or len(names) > ONE_BY_ONE:
        return [*found, together]
    return [*found, *(_one(calls, point, disconnected[s], ({}, [(variables[s], value[s])]), s) for s in names)]


def results(found: list[Moved], float_outputs: list[str], dtype: str) -> tuple[list[NumericResult], list[Finding]]:
    """A failing row and a GA204 for each source that moved an output the static pass found no path to."""
    rows, findings = [], []
    for m in found:
        if not m.outputs:
            continue
        outs = ", ".join(m.outputs)
        verb = "changes" if len(m.outputs) == 1 else "change"
        why = (f"{outs} {verb} when {m.source} moves ({m.change:.2g} of their size at a relative step of {STEP:g}; the "
               "same point gives them again bit for bit), yet the static pass finds no path from it and TensorFlow "
               "gives it no gradient: the value reaches them in a way the gradient does not follow")
        source = m.source if "," not in m.source else ALL_VARIABLES
        rows.append(NumericResult(source=source, outputs=CheckedOutputs.of(m.outputs, float_outputs), status="fail",
                                  rel_error=1.0, step=STEP, dtype=dtype, evaluations=3, reason=why))
        findings.append(rules.MissingGradient.finding(
            f"{why} (a variable written in one function or loop body and read back in another, a branch that "
            "writes state)", sources=tuple(m.source.split(", ")), outputs=m.outputs,
            fix="Compute the outputs from the value itself, not from a variable it was written into (pass it as a "
                "function result or loop variable); keep variables for state that needs no gradient."))
    return rows, findings


@dataclass(frozen=True)
class Target:
    """What the check calls: the model (`call(**inputs)`, its input specs), every variable it holds (put back after
    each call) and its trainable variables by source name."""

    call: Callable[..., dict[str, Any]]
    specs: dict[str, Any]
    state: list[Any]
    variables: dict[str, Any]


def check(target: Target, point: dict[str, np.ndarray], disconnected: dict[str, list[str]], seed: int) -> list[Moved]:
    """The unseen-dependence check of the sources in `disconnected` (source -> its disconnected float outputs)."""
    wanted = {s: o for s, o in disconnected.items() if o and (s in point or s in target.variables)}
    if not wanted:
        return []
    return sources_moved(_Calls(target.call, target.specs, target.state), point, wanted, target.variables,
                         np.random.default_rng([seed, 31]))
