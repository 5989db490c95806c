"""Issue 11: the numeric checks hold on real models and real inputs (whole audits, default options)."""

from __future__ import annotations

import os

import numpy as np
import pytest

THIRDPARTY = os.path.join(os.path.dirname(__file__), "..", "..", "sample_models", "thirdparty")


@pytest.fixture(scope="module")
def audit_of(models):
    from gradaudit.api import AuditOptions, audit_saved_model

    cache = {}

    def get(name: str, **options):
        key = (name, tuple(sorted(options.items())))
        if key not in cache:
            path = models(name) if not name.startswith("thirdparty/") else os.path.join(THIRDPARTY, name[11:])
            cache[key] = audit_saved_model(path, AuditOptions(**options))
        return cache[key]

    return get


def rules(report) -> set[str]:
    return {f.rule for f in report.findings if f.severity.value != "info"}


def domains_of(path: str):
    from gradaudit.api import AuditOptions, audit_saved_model  # noqa: F401 - the static pass's reader
    from gradaudit.flow import analyse
    from gradaudit.graph.gradients import GradientOracle
    from gradaudit.numeric.domains import infer
    from gradaudit.targets.saved_model import SavedModelFile

    model = SavedModelFile(path, ("serve",))
    return infer(analyse(model, model.signature("serving_default"), GradientOracle()))


# -- inputs the model was made for ------------------------------------------------------------------

@pytest.mark.parametrize("name,padded", [("text_masked", True), ("text", False)])
def test_token_ids_come_from_the_embedding_table(models, name, padded):
    import tensorflow as tf

    from gradaudit.numeric import NumericOptions
    from gradaudit.numeric.inputs import synthesise

    d = domains_of(models(name)).inputs["tokens"]
    assert (d.kind, d.high, d.padded) == ("ids", 50, padded)
    ids = synthesise({"tokens": tf.TensorSpec([None, 6], tf.int32)}, NumericOptions(batch_size=4),
                     domains_of(models(name)))["tokens"]
    assert ids.min() >= 0 and ids.max() < 50
    # padding only where the mask reads it, and never a whole example
    assert bool((ids == 0).any()) == padded and (ids != 0).any(axis=1).all()


@pytest.mark.parametrize("name", ["text_masked", "text"])
def test_recurrent_text_models_pass_with_synthesised_inputs(audit_of, name):
    r = audit_of(name)
    assert [(n.source, n.status) for n in r.numeric] == [("*", "pass")]
    assert not rules(r) & {"gradient-mismatch", "unrunnable-model"}


def test_softmax_cross_entropy_labels_are_a_distribution(models, audit_of):
    import tensorflow as tf

    from gradaudit.numeric import NumericOptions
    from gradaudit.numeric.inputs import synthesise

    domains = domains_of(models("xent"))
    assert domains.inputs["labels"].kind == "distribution" and not domains.uncertain
    labels = synthesise({"labels": tf.TensorSpec([None, 3], tf.float32)}, NumericOptions(), domains)["labels"]
    assert (labels >= 0).all() and np.allclose(labels.sum(axis=-1), 1.0)
    r = audit_of("xent")
    assert {n.status for n in r.numeric} == {"pass"} and "gradient-mismatch" not in rules(r)
    assert r.verdict() == "pass"


def test_labels_of_unknown_domain_are_inconclusive_naming_the_op(audit_of):
    """Smoothed labels: the input reaches the loss through Mul/Add, so its domain is not read."""
    r = audit_of("xent_smoothed")
    assert "gradient-mismatch" not in {f.rule for f in r.findings}
    x = [n for n in r.numeric if n.source == "x" and n.scale is None][0]
    assert x.status == "inconclusive"
    assert "SoftmaxCrossEntropyWithLogits" in x.reason and "--inputs" in x.reason


def test_labels_given_with_inputs_are_trusted(models, audit_of, tmp_path):
    rng = np.random.default_rng(0)
    labels = rng.random((2, 3)).astype("float32")
    path = str(tmp_path / "inputs.npz")
    np.savez(path, x=rng.standard_normal((2, 4)).astype("float32"), labels=labels / labels.sum(-1, keepdims=True))
    r = audit_of("xent_smoothed", inputs_file=path)
    base = {n.source: n.status for n in r.numeric if n.scale is None}
    assert base == {"x": "pass", "labels": "pass", "w": "pass"}


# -- more than one point ----------------------------------------------------------------------------

def test_custom_gradient_wrong_only_above_two_fails_by_default(audit_of):
    r = audit_of("above_two")
    base = [n for n in r.numeric if n.scale is None]
    assert [n.status for n in base] == ["pass"]  # N(0, 1) inputs rarely exceed 2
    at_scale = {n.scale: n.status for n in r.numeric if n.scale is not None}
    assert at_scale[100.0] == "fail" and at_scale[-600.0] == "fail" and at_scale[10.0] == "fail"
    (f,) = [f for f in r.findings if f.rule == "gradient-mismatch"]  # one per source: the first point's
    assert f.severity.value == "error" and "At the probe point inputs ×" in f.message and f.op.op_type == "IdentityN"
    assert r.verdict() == "fail"


def test_healthy_model_passes_at_the_probe_points(audit_of):
    r = audit_of("above_two_ok")
    checked = [n for n in r.numeric if n.scale is not None]
    # 10: the moderate points stacked; 1e-3: its gradient is a custom one (CHECKED_WRITTEN); 0: inputs x 0
    assert {n.scale for n in checked} == {0.0, 1e-3, 10.0, 100.0, -600.0}
    assert {n.status for n in checked} == {"pass"} and r.verdict() == "pass"
    # the numeric checks' float64 copy runs: the probe points are checked on it, and the rows say so
    assert all(n.dtype == "float64" and n.precision_reason == "float64 copy of the model" for n in checked)


def test_log1pexp_in_a_keras_model_is_confirmed_by_default(audit_of):
    r = audit_of("keras_log1pexp")
    (lint,) = [f for f in r.findings if f.rule == "log1p-exp"]
    assert lint.severity.value == "error" and "Confirmed by the stability probes" in lint.message
    assert any(s.scale in (300.0, 600.0) and s.status == "nonfinite_forward" for s in r.stability)


# -- checks that run wherever the model runs --------------------------------------------------------

def test_float64_checks_say_so(audit_of):
    r = audit_of("mlp")
    base = [n for n in r.numeric if n.scale is None]
    assert {n.dtype for n in base} == {"float64"}
    assert {n.precision_reason for n in base} == {"float64 copy of the model"}


def thirdparty(name: str) -> str:
    path = os.path.join(THIRDPARTY, name)
    if not os.path.exists(os.path.join(path, "saved_model.pb")):
        pytest.skip(f"third-party fixture {name} not built")
    return "thirdparty/" + name


def test_jax2tf_model_falls_back_to_float32_and_fails_on_its_wrong_saved_gradient(audit_of):
    r = audit_of(thirdparty("jax_custom_vjp_wrong"))
    base = {n.source: n for n in r.numeric if n.scale is None}
    assert base["x"].status == "fail" and base["x"].dtype == "float32"
    assert "float64 copy" in base["x"].precision_reason and "XlaCallModule" in base["x"].precision_reason
    assert "gradient-mismatch" in rules(r) and "unrunnable-model" not in {f.rule for f in r.findings}


def test_jax2tf_model_with_a_correct_saved_gradient_passes(audit_of):
    r = audit_of(thirdparty("jax_custom_vjp_ok"))
    assert {n.status for n in r.numeric} <= {"pass", "inconclusive"} and "pass" in {n.status for n in r.numeric}
    assert "gradient-mismatch" not in rules(r)


def test_jax2tf_gradient_wrong_above_two_fails_by_default(audit_of):
    r = audit_of(thirdparty("jax_custom_vjp_wrong_x_gt_2"))
    assert "gradient-mismatch" in rules(r)


def test_mismatch_without_custom_gradient_names_the_ops_to_look_at(audit_of, tmp_path):
    """Labels that are not a distribution, given with --inputs: TensorFlow's own gradient of the loss
    differs from its derivative; no custom gradient is blamed, the loss op is named (its own check at the values
    the model gave it fails), and the fix says what its gradient assumes."""
    rng = np.random.default_rng(1)
    path = str(tmp_path / "bad_labels.npz")
    np.savez(path, x=rng.standard_normal((2, 4)).astype("float32"),
             labels=rng.standard_normal((2, 3)).astype("float32"))
    r = audit_of("xent", inputs_file=path)
    found = [f for f in r.findings if f.rule == "gradient-mismatch" and "x" in f.sources]
    assert found, [(f.rule, f.message) for f in r.findings]
    f = found[0]
    assert f.op is not None and f.op.op_type == "SoftmaxCrossEntropyWithLogits"
    assert "registered gradient (TensorFlow's own)" in f.message and "custom gradient" not in f.message
    assert "labels that are a distribution" in f.fix and "Fix the gradient function" not in f.fix


def test_ids_gathered_from_a_variable_and_other_integers(tmp_path):
    """tf.gather on a tf.Variable is a ResourceGather: its rows bound the ids; an integer used as a number
    gets small positive values, one used as an index into a table of unknown size gets 0."""
    import tensorflow as tf
    from helpers import save_module

    class M(tf.Module):
        def __init__(self):
            self.table = tf.Variable(np.ones((7, 3), "float32"), name="table")

        @tf.function(input_signature=[tf.TensorSpec([None, 5], tf.int64, name="ids"),
                                      tf.TensorSpec([None], tf.int32, name="count"),
                                      tf.TensorSpec([None, 3], tf.float32, name="x"),
                                      tf.TensorSpec([None], tf.int32, name="pick")])
        def __call__(self, ids, count, x, pick):
            rows = tf.gather(self.table, ids)
            picked = tf.gather(x, pick, axis=1)
            return {"y": tf.reduce_sum(rows, axis=1) * tf.cast(count, tf.float32)[:, None] + picked[:, None]}

    d = domains_of(save_module(M(), str(tmp_path / "gather"))).inputs
    assert (d["ids"].kind, d["ids"].high, d["ids"].padded) == ("ids", 7, False)
    assert d["ids"].op.op_type == "ResourceGather"
    assert d["count"].kind == "count" and d["pick"].kind == "index"


@pytest.mark.parametrize("name", ["keras_lstm_masked", "keras_lstm_unmasked", "keras_gru_masked", "keras_gru_unmasked",
                                  "keras_softmax_xent"])
def test_thirdparty_keras_text_and_loss_models_pass_with_synthesised_inputs(audit_of, name):
    r = audit_of(thirdparty(name))
    assert r.numeric and {n.status for n in r.numeric} == {"pass"}, [(n.source, n.status, n.reason) for n in r.numeric]
    assert "gradient-mismatch" not in {f.rule for f in r.findings} and r.verdict() == "pass"


def test_lookup_table_keys_keep_zero(tmp_path):
    """Keys of a lookup table whose values index an embedding: the embedding's rows say nothing about the
    keys (the table's content is not read), so they are not bounded by them."""
    import tensorflow as tf
    from helpers import save_module

    class M(tf.Module):
        def __init__(self):
            self.table = tf.lookup.StaticHashTable(
                tf.lookup.KeyValueTensorInitializer(tf.constant([100, 200], tf.int64),
                                                    tf.constant([1, 2], tf.int64)), 0)
            self.emb = tf.Variable(np.ones((3, 2), "float32"), name="emb")

        @tf.function(input_signature=[tf.TensorSpec([None], tf.int64, name="keys")])
        def __call__(self, keys):
            return {"y": tf.gather(self.emb, self.table.lookup(keys))}

    d = domains_of(save_module(M(), str(tmp_path / "lookup"))).inputs
    assert d["keys"].kind == "index"
