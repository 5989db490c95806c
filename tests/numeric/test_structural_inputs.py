"""Synthesised integer inputs the ops accept (issue 22): a length bounded by a time axis, a position along an
axis, segment ids, a ragged tensor's row splits; where the graph does not tell (a sparse tensor's indices into a
shape), the synthesised inputs are said to be outside what the model accepts, the verdict is incomplete and
--inputs is asked for, never a GA201 or GA205.

Truth: tf.GradientTape on the loaded model at valid inputs, against float64 central differences.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def _save(module, path: str) -> str:
    import tensorflow as tf

    tf.saved_model.save(module, path, signatures={"serving_default": module.__call__})
    return path


def ctc_model(path: str) -> str:
    import tensorflow as tf

    class M(tf.Module):
        def __init__(self):
            self.w = tf.Variable(np.random.default_rng(0).standard_normal((3, 6)).astype("float32") * 0.5, name="w")

        @tf.function(input_signature=[tf.TensorSpec([None, 4, 3], tf.float32), tf.TensorSpec([None, 4], tf.int32),
                                      tf.TensorSpec([None], tf.int32), tf.TensorSpec([None], tf.int32)])
        def __call__(self, feats, labels, label_length, logit_length):
            logits = feats @ self.w
            return {"loss": tf.nn.ctc_loss(labels, logits, label_length, logit_length, logits_time_major=False,
                                           blank_index=-1)}

    return _save(M(), path)


def segment_model(path: str) -> str:
    import tensorflow as tf

    class M(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32), tf.TensorSpec([None], tf.int32)])
        def __call__(self, x, seg):
            return {"y": tf.math.unsorted_segment_sum(x * x, seg, num_segments=3)}

    return _save(M(), path)


def ragged_model(path: str) -> str:
    import tensorflow as tf

    class M(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32), tf.TensorSpec([None], tf.int64)])
        def __call__(self, values, row_splits):
            return {"y": tf.reduce_sum(tf.sin(tf.RaggedTensor.from_row_splits(values, row_splits)), axis=1)}

    return _save(M(), path)


def sparse_model(path: str) -> str:
    """A sparse tensor's indices into a [4, 5] shape, as a signature input: nothing bounds them but the shape."""
    import tensorflow as tf

    class M(tf.Module):
        def __init__(self):
            self.w = tf.Variable(np.random.default_rng(9).standard_normal((5, 3)).astype("float32"), name="w")

        @tf.function(input_signature=[tf.TensorSpec([None, 2], tf.int64), tf.TensorSpec([None], tf.float32)])
        def __call__(self, indices, values):
            sp = tf.sparse.reorder(tf.sparse.SparseTensor(indices, values, dense_shape=[4, 5]))
            return {"y": tf.sparse.sparse_dense_matmul(sp, self.w)}

    return _save(M(), path)


def scatter_model(path: str) -> str:
    """Rows a scatter update writes (last write wins), indexed by an integer input: with two equal rows one update
    is lost from the forward while TensorFlow's gradient hands each update its part."""
    import tensorflow as tf

    class M(tf.Module):
        def __init__(self):
            self.t = tf.Variable(np.ones((6, 2), np.float32), name="t")

        @tf.function(input_signature=[tf.TensorSpec([3], tf.int32), tf.TensorSpec([3, 2], tf.float32)])
        def __call__(self, rows, v):
            out = tf.tensor_scatter_nd_update(tf.identity(self.t) * 2.0, tf.expand_dims(rows, 1), tf.sin(v))
            return {"y": out * out}

    return _save(M(), path)


def partition_model(path: str) -> str:
    """Partition indices in [0, 3), the op's number of partitions."""
    import tensorflow as tf

    class M(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([6], tf.float32), tf.TensorSpec([6], tf.int32)])
        def __call__(self, x, part):
            parts = tf.dynamic_partition(x, part, 3)
            idx = tf.dynamic_partition(tf.range(6), part, 3)
            return {"st": tf.dynamic_stitch(idx, [parts[0] * 2.0, tf.sin(parts[1]), parts[2] ** 2])}

    return _save(M(), path)


def gather_nd_model(path: str) -> str:
    """An N-d gather into a [5, 3, 4] variable: each of an index's two coordinates stays below 3, the smaller of
    the two dimensions it indexes (not below 5, the table's rows)."""
    import tensorflow as tf

    class M(tf.Module):
        def __init__(self):
            self.grid = tf.Variable(np.random.default_rng(11).standard_normal((5, 3, 4)).astype("float32"), name="g")

        @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32), tf.TensorSpec([None, 2], tf.int32)])
        def __call__(self, x, idx):
            return {"y": tf.gather_nd(self.grid, idx) * tf.sin(x)}

    return _save(M(), path)


def gather_nd_computed_model(path: str) -> str:
    """The second of the class: an N-d gather into a computed [4, 2, 3] tensor (its shape saved with the graph,
    no variable behind it): coordinates below 2."""
    import tensorflow as tf

    class M(tf.Module):
        def __init__(self):
            self.t = tf.Variable(np.random.default_rng(12).standard_normal((4, 2, 3)).astype("float32"), name="t")

        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32), tf.TensorSpec([None, 2], tf.int32)])
        def __call__(self, x, idx):
            return {"y": tf.gather_nd(tf.sin(self.t), idx) * x}

    return _save(M(), path)


VALID = {
    "ctc": {"feats": np.random.default_rng(2).standard_normal((2, 4, 3)),
            "labels": np.array([[1, 2, 3, 4], [2, 1, 4, 3]]), "label_length": np.array([2, 3]),
            "logit_length": np.array([4, 4])},
    "segment": {"x": np.random.default_rng(3).standard_normal((4, 3)), "seg": np.array([0, 2, 1, 2])},
    "ragged": {"values": np.random.default_rng(4).standard_normal(5), "row_splits": np.array([0, 2, 5])},
    "scatter": {"rows": np.array([4, 0, 2]), "v": np.random.default_rng(7).standard_normal((3, 2))},
    "partition": {"x": np.random.default_rng(8).standard_normal(6), "part": np.array([0, 2, 1, 1, 0, 2])},
    "sparse": {"indices": np.array([[0, 1], [1, 3], [2, 0], [3, 4]]),
               "values": np.random.default_rng(10).standard_normal(4)},
    "gather_nd": {"x": np.random.default_rng(13).standard_normal((3, 4)), "idx": np.array([[4, 2], [0, 1], [2, 0]])},
    "gather_nd_computed": {"x": np.random.default_rng(14).standard_normal((2, 3)), "idx": np.array([[3, 1], [0, 0]])},
}
FLOAT = {"ctc": "feats", "segment": "x", "ragged": "values", "scatter": "v", "partition": "x", "sparse": "values",
         "gather_nd": "x", "gather_nd_computed": "x"}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("structural")
    return {name: recipe(str(root / name)) for name, recipe in
            {"ctc": ctc_model, "segment": segment_model, "ragged": ragged_model, "scatter": scatter_model,
             "partition": partition_model, "sparse": sparse_model, "gather_nd": gather_nd_model,
             "gather_nd_computed": gather_nd_computed_model}.items()}


def _truth_agrees(path: str, name: str, values: dict | None = None) -> bool:
    """tf.GradientTape's gradient of a random projection with respect to the float input, at valid inputs (or
    `values`), against float64 central differences of the loaded model's forward."""
    import tensorflow as tf

    obj = tf.saved_model.load(path)  # kept alive while its function runs
    fn = obj.signatures["serving_default"]
    specs = fn.structured_input_signature[1]
    given = values or VALID[name]
    feed = {k: tf.constant(v, specs[k].dtype) for k, v in given.items()}
    src = FLOAT[name]
    out = next(iter(fn(**feed).values()))
    u = np.random.default_rng(5).standard_normal(out.shape)
    with tf.GradientTape() as tape:
        tape.watch(feed[src])
        phi = tf.reduce_sum(tf.cast(next(iter(fn(**feed).values())), tf.float64) * u)
    g = tape.gradient(phi, feed[src]).numpy().astype(np.float64)
    d = np.random.default_rng(6).standard_normal(g.shape)
    h = 2.0 ** -8

    def at(t):
        moved = dict(feed, **{src: tf.constant(given[src] + t * d, specs[src].dtype)})
        return float(np.sum(next(iter(fn(**moved).values())).numpy().astype(np.float64) * u))

    numeric = (at(h) - at(-h)) / (2 * h)
    return abs(numeric - float(np.sum(g * d))) <= 1e-2 * max(abs(numeric), 1e-6)


@pytest.mark.parametrize("name", ["ctc", "segment", "scatter", "partition", "ragged", "gather_nd",
                                  "gather_nd_computed"])
def test_inputs_the_ops_accept_are_synthesised_and_the_healthy_model_passes(built, name):
    from gradaudit.api import AuditOptions, audit_saved_model

    assert _truth_agrees(built[name], name)
    report = audit_saved_model(built[name], AuditOptions())
    assert not {"GA201", "GA205"} & {f.code for f in report.findings}, [f.message for f in report.findings]
    assert report.verdict() == "pass", (report.incomplete, [(n.source, n.status, n.reason) for n in report.numeric])


def test_inputs_the_graph_does_not_describe_make_the_audit_incomplete_not_a_finding(built):
    from gradaudit.api import AuditOptions, audit_saved_model

    assert _truth_agrees(built["sparse"], "sparse")
    report = audit_saved_model(built["sparse"], AuditOptions())
    assert not {"GA201", "GA204", "GA205"} & {f.code for f in report.findings}
    assert report.verdict() == "incomplete"
    assert any("outside what the model accepts" in line and "--inputs" in line for line in report.incomplete)


def test_the_domains_read_from_the_graph(built):
    from gradaudit.flow import analyse
    from gradaudit.graph.gradients import GradientOracle
    from gradaudit.numeric.domains import infer
    from gradaudit.targets.saved_model import SavedModelFile

    def kinds(path):
        model = SavedModelFile(path, ("serve",))
        return {k: (v.kind, v.high) for k, v in infer(analyse(model, model.signature("serving_default"),
                                                                GradientOracle())).inputs.items()}

    assert kinds(built["segment"])["seg"] == ("segments", 3)
    assert kinds(built["partition"])["part"] == ("partitions", 3)
    ctc = kinds(built["ctc"])
    assert ctc["logit_length"][0] == "length" and ctc["label_length"] == ("position", 5)
    # an N-d gather's coordinates: below the smallest dimension they index (5 rows but 3 columns; 4 and 2)
    assert kinds(built["gather_nd"])["idx"] == ("ids", 3)
    assert kinds(built["gather_nd_computed"])["idx"] == ("ids", 2)


def test_equal_rows_of_a_scatter_update_make_the_gradient_differ_so_the_synthesised_ones_are_distinct(built):
    """The truth behind the scatter domain: at two equal rows TensorFlow's gradient is not the derivative; the
    indices gradaudit synthesises for the model are distinct and inside the table."""
    import tensorflow as tf

    from gradaudit.flow import analyse
    from gradaudit.graph.gradients import GradientOracle
    from gradaudit.numeric.domains import infer
    from gradaudit.numeric.inputs import synthesise
    from gradaudit.results import AuditOptions
    from gradaudit.targets.saved_model import SavedModelFile

    assert not _truth_agrees(built["scatter"], "scatter", dict(VALID["scatter"], rows=np.array([1, 1, 3])))
    model = SavedModelFile(built["scatter"], ("serve",))
    domains = infer(analyse(model, model.signature("serving_default"), GradientOracle()))
    assert domains.inputs["rows"].distinct is not None
    specs = {"rows": tf.TensorSpec([3], tf.int32), "v": tf.TensorSpec([3, 2], tf.float32)}
    for seed in range(5):
        rows = synthesise(specs, AuditOptions(seed=seed), domains)["rows"]
        assert len(set(rows.tolist())) == 3 and rows.min() >= 0 and rows.max() < 6, rows


def test_the_report_says_the_scatter_rows_were_distinct_and_repeated_ones_given_fail(built, tmp_path):
    """Tester 13's m16: synthesised distinct rows pass, and the report said nothing of what that left unchecked.
    The note names the scatter and the repeated rows; given repeated rows (where the tape's gradient is not the
    derivative, _truth_agrees) the audit fails on them, and the note is gone (the rows are the user's)."""
    from gradaudit.api import AuditOptions, audit_saved_model

    report = audit_saved_model(built["scatter"], AuditOptions())
    said = [n.text for n in report.notes if n.text.startswith("Input rows")]
    assert len(said) == 1 and "distinct rows in [1, 6)" in said[0] and "TensorScatterUpdate" in said[0], said
    assert "--inputs" in said[0] and report.verdict() == "pass"
    repeated = dict(VALID["scatter"], rows=np.array([1, 1, 3]))
    assert not _truth_agrees(built["scatter"], "scatter", repeated)
    np.savez(tmp_path / "rows.npz", **{k: np.asarray(v, np.int32 if k == "rows" else np.float32)
                                       for k, v in repeated.items()})
    given = audit_saved_model(built["scatter"], AuditOptions(inputs_file=str(tmp_path / "rows.npz")))
    assert given.verdict() == "fail" and "GA201" in {f.code for f in given.findings}
    assert not [n for n in given.notes if n.text.startswith("Input rows")]


def test_the_probes_stopped_by_a_kernel_refusing_synthesised_integers_say_so_and_ask_for_inputs():
    """Wording: where integer inputs were made up here, a kernel refusing the values during the probes is the
    inputs being outside what the model accepts (the audit's incomplete line asks for --inputs); with every integer
    input given, or another error, TensorFlow's words stand."""
    from gradaudit.numeric.stability import StabilityOutcome, _refused

    error = "InvalidArgumentError: indices[0] = [3, 3] does not index into param shape [5,3,4]"
    made_up = StabilityOutcome(synthesised=("idx",))
    said = _refused(error, made_up)
    assert "outside what the model accepts" in said and "idx synthesised" in said and "--inputs" in said
    assert error in said
    assert _refused(error, StabilityOutcome()) == error
    assert _refused("ResourceExhaustedError: OOM", made_up) == "ResourceExhaustedError: OOM"
