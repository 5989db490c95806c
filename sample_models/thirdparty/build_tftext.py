"""SavedModels written with tensorflow-text: tokenizer ops on string paths, and MaxSpanningTree on a float path.

Run in the tensorflow-text venv (tensorflow-text 2.21.1, which pins TensorFlow 2.21)::

    /work/venvs/tftext/bin/python sample_models/thirdparty/build_tftext.py [OUT_DIR [MODEL...]]

(the venv: ``python3.11 -m venv /work/venvs/tftext && /work/venvs/tftext/bin/pip install tensorflow-text==2.21.1``).
Writes OUT_DIR/tftext_*/ (SavedModel, truth.json, inputs.npz). Everything is built in code from fixed values:
no vocabulary file, no download. The census in truth.json (op types unknown to a plain TensorFlow) is run
with the system python3, where tensorflow_text is not installed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import tensorflow as tf
import tensorflow_text as tft

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import truth

_SAVE_OPTIONS = tf.saved_model.SaveOptions(experimental_custom_gradients=True)
_VOCAB = ["[UNK]", "the", "grad", "##ient", "flow", "##s", "audit", "model", "text", ",", "!", "a", "##b", "##c"]
_BUCKETS = 16
_DIM = 4


def _var(shape, seed, name):
    rng = np.random.default_rng(seed)
    return tf.Variable(rng.normal(0.0, 0.5, size=shape).astype(np.float32), name=name)


def _save(m: tf.Module, export_dir: str) -> None:
    tf.saved_model.save(m, export_dir, signatures={"serving_default": m.__call__.get_concrete_function()},
                        options=_SAVE_OPTIONS)


class WhitespaceBag(tf.Module):
    """``text`` string [None] -> WhitespaceTokenizer -> to_hash_bucket_fast (16 buckets) -> gather rows of the
    trainable ``embedding/table`` [16,4] -> mean over tokens -> concat with float ``x`` [None,2] ->
    ``@ dense/kernel`` [6,3] -> ``logits`` float [None,3].

    Tokenizer ops touch only the string path; the float path (table, kernel, x -> logits) has only built-in ops.
    """

    def __init__(self):
        super().__init__()
        self.tokenizer = tft.WhitespaceTokenizer()
        self.table = _var([_BUCKETS, _DIM], 1, "embedding/table")
        self.kernel = _var([_DIM + 2, 3], 2, "dense/kernel")

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text"),
                                  tf.TensorSpec([None, 2], tf.float32, name="x")])
    def __call__(self, text, x):
        tokens = self.tokenizer.tokenize(text)  # RaggedTensor of strings
        ids = tf.strings.to_hash_bucket_fast(tokens, _BUCKETS)
        emb = tf.gather(self.table, ids)  # ragged [B, (T), DIM]
        pooled = tf.reduce_mean(emb, axis=1)  # dense [B, DIM] (NaN for a text with no token)
        feats = tf.concat([pooled, x], axis=-1)
        return {"logits": tf.matmul(feats, self.kernel), "num_tokens": tokens.row_lengths()}


class WordpieceBag(tf.Module):
    """``text`` string [None] -> UnicodeScriptTokenizer -> FastWordpieceTokenizer (14-token vocabulary in
    code, int64 ids) -> embedding ``embedding/table`` [14,4] -> sum over pieces -> ``@ proj`` [4,2] ->
    ``score`` float [None,2]. Two tensorflow-text ops, both on the string -> int path.
    """

    def __init__(self):
        super().__init__()
        self.words = tft.UnicodeScriptTokenizer()
        self.pieces = tft.FastWordpieceTokenizer(vocab=_VOCAB, token_out_type=tf.int64, unknown_token="[UNK]")
        self.table = _var([len(_VOCAB), _DIM], 3, "embedding/table")
        self.proj = _var([_DIM, 2], 4, "proj")

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text")])
    def __call__(self, text):
        words = self.words.tokenize(text)  # [B, (W)]
        ids = self.pieces.tokenize(words).merge_dims(1, 2)  # [B, (P)]
        emb = tf.gather(self.table, ids)
        pooled = tf.reduce_sum(emb, axis=1)  # dense [B, DIM]
        return {"score": tf.matmul(pooled, self.proj)}


class SpanningTree(tf.Module):
    """``MaxSpanningTree`` (tensorflow-text, gradient registered by tensorflow_text.python.ops.mst_ops) on the
    float path: ``x`` float32 [None,3,3] * trainable ``w`` [3,3] -> scores -> max_spanning_tree(num_nodes=3) ->
    ``max_score`` float [None] (differentiable w.r.t. the scores: a one-hot subgradient) and ``heads`` int32
    [None,3] (argmax sources, not differentiable). ``total`` = max_score + sum(x) adds a built-in path.
    """

    def __init__(self):
        super().__init__()
        self.w = tf.Variable([[1.0, 0.5, -0.25], [0.75, 1.0, 0.5], [-0.5, 0.25, 1.0]], name="w")

    @tf.function(input_signature=[tf.TensorSpec([None, 3, 3], tf.float32, name="x")])
    def __call__(self, x):
        scores = x * self.w
        num_nodes = tf.fill([tf.shape(x)[0]], 3)
        max_score, heads = tft.max_spanning_tree(num_nodes, scores)
        return {"max_score": max_score, "heads": heads, "total": max_score + tf.reduce_sum(x, axis=[1, 2])}


class ViterbiDecode(tf.Module):
    """``ConstrainedSequence`` (tensorflow-text's Viterbi decoder) takes float inputs and returns integers.

    Inputs ``scores`` float32 [None,4,3] and ``lengths`` int32 [None]; trainable ``w`` [3] (class weights)
    and ``transitions`` [3,3] (transition weights, a float input of the op and of nothing else).
    s = scores * w; ``path`` = viterbi_constrained_sequence(s, lengths, transition_weights=transitions)
    (int32, padded to [None,4]); ``path_score`` = sum over valid steps of s[b, t, path[b, t]] (float [None]).
    The op lies only on the integer path: scores and w reach path_score through the gather's params;
    transitions reaches no float output except through the op's integer output.
    """

    def __init__(self):
        super().__init__()
        self.w = tf.Variable([1.0, 0.5, 2.0], name="w")
        self.transitions = tf.Variable([[0.5, -0.25, 0.0], [0.1, 0.3, -0.2], [-0.4, 0.2, 0.6]],
                                       name="transitions")

    @tf.function(input_signature=[tf.TensorSpec([None, 4, 3], tf.float32, name="scores"),
                                  tf.TensorSpec([None], tf.int32, name="lengths")])
    def __call__(self, scores, lengths):
        s = scores * self.w
        path = tft.viterbi_constrained_sequence(s, lengths, transition_weights=self.transitions,
                                                use_log_space=True, use_start_and_end_states=False)
        dense = path.to_tensor(default_value=0, shape=[None, 4])
        picked = tf.gather(s, dense, batch_dims=2)  # [B, 4]
        mask = tf.sequence_mask(lengths, 4, dtype=tf.float32)
        return {"path": dense, "path_score": tf.reduce_sum(picked * mask, axis=-1)}


def _inputs():
    rng = np.random.default_rng(7)
    return {
        "tftext_whitespace_bag": {"text": np.array([b"the gradient flows", b"audit the text model", b"a"]),
                                  "x": np.array([[0.5, -1.0], [1.5, 0.25], [-0.75, 2.0]], np.float32)},
        "tftext_wordpiece_bag": {"text": np.array([b"the gradients flow!", b"audit, abc model", b"text"])},
        "tftext_max_spanning_tree": {"x": rng.normal(0.0, 1.0, size=(2, 3, 3)).astype(np.float32)},
        "tftext_viterbi": {"scores": rng.normal(0.0, 1.0, size=(2, 4, 3)).astype(np.float32),
                           "lengths": np.array([4, 3], np.int32)},
    }


MODELS = {
    "tftext_whitespace_bag": WhitespaceBag,
    "tftext_wordpiece_bag": WordpieceBag,
    "tftext_max_spanning_tree": SpanningTree,
    "tftext_viterbi": ViterbiDecode,
}


def main(out_dir: str, names: list[str] | None = None) -> None:
    ins = _inputs()
    paths = []
    for name, cls in MODELS.items():
        if names and name not in names:
            continue
        path = os.path.join(out_dir, name)
        m = cls()
        m(**{k: tf.constant(v) for k, v in ins[name].items()})  # runs once before saving
        _save(m, path)
        data = truth.signature_truth(path, {"serving_default": ins[name]})
        data.update(model=name, builder="build_tftext.py",
                    environment=truth.environment("tensorflow-text", tft.__version__),
                    load_ops="tensorflow_text")
        truth.write(path, data)
        np.savez(os.path.join(path, "inputs.npz"), **ins[name])
        paths.append(path)
    subprocess.run([os.environ.get("GRADAUDIT_PLAIN_PYTHON", "python3"), os.path.join(HERE, "truth.py"),
                    "census", *paths], check=True)
    for p in paths:
        with open(os.path.join(p, "truth.json"), encoding="utf-8") as f:
            data = json.load(f)
        for row in data["entry_points"]["serving_default"]["pairs"]:
            print(f"{os.path.basename(p)} {row['source']} -> {row['output']}: {row['truth']}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else HERE, sys.argv[2:])
