"""What --precision runs: one run of the frozen graph per point gives both the ops' values and the sources'
gradients, bit for bit the loaded model's own gradient pass (numeric.runner.Runner, what the stage ran before);
a point already run is not run again, and the own point's gradients the stability probes computed (at the inputs
given, or at the synthesised point when they compare float32 with the float64 copy) are not computed again: a
forward run gives its ops' values; where TensorFlow cannot build the gradients in the frozen graph, the stage
falls back to the Runner and a forward run, with the same results."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from gradaudit.api import AuditOptions, audit_saved_model
from gradaudit.numeric import precision
from gradaudit.numeric.forensics import Forensics
from gradaudit.numeric.probes import dense
from gradaudit.numeric.runner import Runner

from .test_precision import Loop  # a While loop: TensorFlow cannot run the frozen copy of its graph

X = np.array([[0.5, -1.0, 1.5, 2.0], [-0.75, 1.25, 0.25, -1.5]], np.float32)  # largest magnitude 2


@tf.custom_gradient
def log1pexp(x):
    e = tf.exp(x)

    def grad(upstream):
        return upstream * (1 - 1 / (1 + e))

    return tf.math.log(1 + e), grad


class Mixed(tf.Module):
    """A variable read twice, a gather (a sparse gradient), a custom gradient, two outputs."""

    def __init__(self):
        super().__init__()
        rng = np.random.default_rng(5)
        self.w = tf.Variable(rng.standard_normal((4, 4)).astype(np.float32), name="w")
        self.table = tf.Variable(rng.standard_normal((6, 4)).astype(np.float32), name="table")
        self.v = tf.Variable(np.full(4, 0.5, np.float32), name="v")

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
    def __call__(self, x):
        h = tf.tanh(x @ self.w) @ self.w
        rows = tf.reduce_sum(tf.gather(self.table, [0, 2, 2, 5]), axis=0)
        return {"y": log1pexp(h * self.v) + rows, "z": tf.reduce_sum(h, axis=1)}


@pytest.fixture(scope="module")
def mixed_model(tmp_path_factory):
    module = Mixed()
    path = tmp_path_factory.mktemp("mixed") / "model"
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.__call__})
    return path


def audit(path, tmp_path, x=X, **options):
    inputs = tmp_path / "inputs.npz"
    np.savez(inputs, x=x)
    return audit_saved_model(str(path), AuditOptions(timeout=None, precision="float16", inputs_file=str(inputs),
                                                     seed=0, **options))


def table(report) -> dict:
    return {(r.kind, r.name, r.scale): r for r in report.precision}


def counting(monkeypatch) -> dict[str, int]:
    """How often the stage ran the frozen graph with its gradients, and the Runner's pass with a forward run."""
    calls = {"together": 0, "apart": 0}

    def count(name: str, method):
        def counted(*args, **kwargs):
            calls[name] += 1
            return method(*args, **kwargs)
        return counted

    monkeypatch.setattr(precision.FrozenRuns, "values_and_gradients",
                        count("together", precision.FrozenRuns.values_and_gradients))
    monkeypatch.setattr(precision.PointRuns, "_apart", count("apart", precision.PointRuns._apart))
    return calls


def test_each_point_is_one_frozen_run_whose_gradients_and_values_are_the_loaded_models(mixed_model, tmp_path,
                                                                                       monkeypatch):
    calls = counting(monkeypatch)
    at = precision.PointRuns.at
    compared: list[int] = []

    def checked(self, point, forward):
        """Each point's result against the Runner's gradient pass and a forward run of a fresh frozen copy."""
        grads, values, failed = at(self, point, forward)
        inputs, variables, outputs = self.sources
        runner = Runner(self.fn, self.base, inputs, variables, outputs)
        runner.move_to(point, runner.var_base)
        _, g_in, g_var = runner.gradient(self.u)
        own = {**{k: dense(g) for k, g in g_in.items()}, **{n: dense(g) for (n, _), g in zip(variables, g_var)}}
        assert set(own) == set(grads) == {"x", "w", "table", "v"} and failed is None
        for name, g in own.items():
            assert g is not None and np.array_equal(g, grads[name]), name  # bit for bit
        fresh = Forensics(self.fn, self.analysis.graph, self.analysis.gradient_functions)
        try:
            alone = fresh.float_values(point)
        finally:
            fresh.close()
        assert len(alone) == len(values)
        for (ref, _, ins, outs), (ref2, _, ins2, outs2) in zip(values, alone):
            assert ref == ref2 and all(np.array_equal(a, b, equal_nan=True) for a, b in zip(ins + outs, ins2 + outs2))
        compared.append(len(values))
        return grads, values, failed

    monkeypatch.setattr(precision.PointRuns, "at", checked)
    report = audit(mixed_model, tmp_path)
    points = {r.scale for r in report.precision}
    assert points == {None, 0.0, 1e-3, 1.0, 1e1, 1e2, 3e2, 6e2, 1e4}  # the own point and the 8 rungs float16 keeps
    # the own point's gradients are the probes' (checked against the Runner above too); its values a forward run
    assert len(compared) == len(points) and calls == {"together": len(points) - 1, "apart": 0}
    assert not [line for line in report.incomplete if "precision" in line]


def test_the_own_point_is_not_run_again_where_the_rung_at_1_is_it(mixed_model, tmp_path, monkeypatch):
    calls = counting(monkeypatch)
    report = audit(mixed_model, tmp_path, x=X / 2)  # largest magnitude 1: the rung at 1 is the point itself
    rows = table(report)
    assert {s for _, _, s in rows} == {None, 0.0, 1e-3, 1.0, 1e1, 1e2, 3e2, 6e2, 1e4}
    assert calls == {"together": 7, "apart": 0}  # the own point's gradients are the probes'
    for (kind, name, scale), r in rows.items():
        if scale is None:
            again = rows[kind, name, 1.0]
            assert (r.entries, r.underflow, r.largest, r.smallest, r.loss_scale) == (
                again.entries, again.underflow, again.largest, again.smallest, again.loss_scale)


@pytest.mark.parametrize("when", ["before", "after"])
def test_where_the_frozen_graph_cannot_be_differentiated_the_runner_gives_the_same_results(mixed_model, tmp_path,
                                                                                          monkeypatch, when):
    """TensorFlow refuses before adding a gradient op, or after (the graph changed: the forward runs on a copy)."""
    together = audit(mixed_model, tmp_path, probe_scales=(1.0, 1e2))
    build = precision.FrozenRuns.with_gradients

    def refuse(self, sources, u):
        if when == "after":
            build(self, sources, u)
        raise LookupError("No gradient defined for operation 'x'")

    calls = counting(monkeypatch)
    monkeypatch.setattr(precision.FrozenRuns, "with_gradients", refuse)
    apart = audit(mixed_model, tmp_path, probe_scales=(1.0, 1e2))
    assert calls == {"together": 0, "apart": 2}  # the rungs; the own point's gradients are the probes'
    assert apart.precision and table(apart) == table(together)
    assert [f.code for f in apart.findings] == [f.code for f in together.findings]
    assert apart.incomplete == together.incomplete


def test_a_point_run_again_where_the_forward_side_failed_says_so_once(tmp_path):
    module = Loop()
    path = tmp_path / "model"
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.__call__})
    report = audit(path, tmp_path, x=X / 2, probe_scales=(1.0,))  # the rung at 1 is the own point
    (line,) = [line for line in report.incomplete if line.startswith("--precision float16")]
    assert "ops' outputs were not checked" in line
    rows = table(report)
    assert {(k, n) for k, n, _ in rows} == {("gradient", "x"), ("gradient", "w")}
    assert {s for _, _, s in rows} == {None, 1.0}


@pytest.mark.parametrize("given", [True, False])
def test_the_own_points_gradients_the_probes_computed_are_not_computed_again(mixed_model, tmp_path, monkeypatch,
                                                                            given):
    """At the inputs given (the probes observe that point) and at the synthesised one (the probes compare the float32
    gradients with the float64 copy's there): one gradient pass per rung, none at the own point, and the same
    rows, findings and notes as when the stage computes the own point's gradients itself."""

    def run():
        if given:
            return audit(mixed_model, tmp_path, probe_scales=(1.0, 1e2))
        return audit_saved_model(str(mixed_model), AuditOptions(timeout=None, precision="float16", seed=0,
                                                                probe_scales=(1.0, 1e2)))

    calls = counting(monkeypatch)
    reused = run()
    assert calls == {"together": 2, "apart": 0}
    monkeypatch.setattr(precision.PointRuns, "_known_at", lambda self, point: False)
    calls.update(together=0)
    computed = run()
    assert calls == {"together": 3, "apart": 0}
    assert reused.precision and table(reused) == table(computed)
    assert [(f.code, f.message) for f in reused.findings] == [(f.code, f.message) for f in computed.findings]
    assert reused.notes == computed.notes and reused.incomplete == computed.incomplete
