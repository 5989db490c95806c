"""A GPT-style decoder-only language model in Keras 3, exported with `model.export`, for the benchmarks.

Token embedding plus a learned position embedding, N pre-norm blocks (LayerNormalization, causal
MultiHeadAttention, residual; LayerNormalization, a gelu MLP of 4 x d_model, residual), a final
LayerNormalization and an LM head to vocabulary logits: tied to the token embedding (the default, as GPT-2)
or a separate Dense without bias (`--untied`). The input is int32 token ids of a fixed sequence length
(`token_ids`, shape [batch, seq]); the output the logits, [batch, seq, vocab]. Weights are random (seeded),
never downloaded. The trainable variables are the model's only differentiable sources.

    python bench/lm.py OUT_DIR [--lm-size 110m|350m|tiny] [--untied] [--seed N]

prints one JSON line: the size's configuration, the parameter count and the exported signature's inputs and
outputs as read back from saved_model.pb.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

# 110m (tied): 32000 x 768 embedding (24.6M) + 12 blocks of 7.1M = 109.6M parameters; 350m (tied): 32000 x 1024
# (32.8M) + 24 blocks of 12.6M = 335M, the GPT-2 small and medium shapes with a 32k vocabulary.
SIZES = {
    "tiny": {"vocab": 1000, "d_model": 64, "layers": 2, "heads": 4, "seq": 16},
    "110m": {"vocab": 32000, "d_model": 768, "layers": 12, "heads": 12, "seq": 64},
    "350m": {"vocab": 32000, "d_model": 1024, "layers": 24, "heads": 16, "seq": 64},
}


def build(vocab: int, d_model: int, layers: int, heads: int, seq: int, tied: bool = True, seed: int = 0):
    import keras
    from keras import ops

    keras.utils.set_random_seed(seed)

    class PositionEmbedding(keras.layers.Layer):
        """A learned [seq, d_model] table added to the token embeddings."""

        def build(self, input_shape):
            self.table = self.add_weight(shape=(input_shape[-2], input_shape[-1]), name="table",
                                         initializer=keras.initializers.RandomNormal(stddev=0.02))

        def call(self, x):
            return x + self.table[None]

    class TiedHead(keras.layers.Layer):
        """Logits as h @ E^T, E the token embedding's table (no variable of its own)."""

        def __init__(self, embedding, **kwargs):
            super().__init__(**kwargs)
            self.embedding = embedding

        def call(self, h):
            return ops.matmul(h, ops.transpose(self.embedding.embeddings))

    init = keras.initializers.RandomNormal(stddev=0.02)
    ids = keras.Input((seq,), dtype="int32", name="token_ids")
    embed = keras.layers.Embedding(vocab, d_model, embeddings_initializer=init, name="token_embedding")
    x = PositionEmbedding(name="position_embedding")(embed(ids))
    for i in range(layers):
        h = keras.layers.LayerNormalization(epsilon=1e-5, name=f"block{i}_ln1")(x)
        h = keras.layers.MultiHeadAttention(heads, d_model // heads, kernel_initializer=init,
                                            name=f"block{i}_attention")(h, h, use_causal_mask=True)
        x = keras.layers.Add(name=f"block{i}_residual1")([x, h])
        h = keras.layers.LayerNormalization(epsilon=1e-5, name=f"block{i}_ln2")(x)
        h = keras.layers.Dense(4 * d_model, activation="gelu", kernel_initializer=init, name=f"block{i}_mlp_in")(h)
        h = keras.layers.Dense(d_model, kernel_initializer=init, name=f"block{i}_mlp_out")(h)
        x = keras.layers.Add(name=f"block{i}_residual2")([x, h])
    x = keras.layers.LayerNormalization(epsilon=1e-5, name="final_ln")(x)
    if tied:
        logits = TiedHead(embed, name="lm_head_tied")(x)
    else:
        logits = keras.layers.Dense(vocab, use_bias=False, kernel_initializer=init, name="lm_head")(x)
    return keras.Model(ids, logits, name="gpt")


def signature_of(path: str, key: str = "serving_default") -> dict:
    """The exported signature's inputs and outputs (name: dtype and shape) read from saved_model.pb."""
    import tensorflow as tf
    from tensorflow.core.protobuf import saved_model_pb2

    sm = saved_model_pb2.SavedModel()
    with open(os.path.join(path, "saved_model.pb"), "rb") as f:
        sm.ParseFromString(f.read())
    sig = sm.meta_graphs[0].signature_def[key]

    def described(tensors) -> dict:
        return {name: {"dtype": tf.dtypes.as_dtype(t.dtype).name,
                       "shape": [d.size if d.size >= 0 else None for d in t.tensor_shape.dim]}
                for name, t in tensors.items()}

    return {"inputs": described(sig.inputs), "outputs": described(sig.outputs)}


def export(path: str, size: str, tied: bool = True, seed: int = 0) -> dict:
    config = SIZES[size]
    model = build(**config, tied=tied, seed=seed)
    params = model.count_params()
    trainable = sum(int(v.numpy().size) for v in model.trainable_variables)
    model.export(path, verbose=False)
    sig = signature_of(path)
    (name, spec), = sig["inputs"].items()
    (_, out), = sig["outputs"].items()
    if spec["dtype"] != "int32" or spec["shape"][1:] != [config["seq"]] or out["shape"][1:] != [config["seq"],
                                                                                             config["vocab"]]:
        raise SystemExit(f"unexpected signature: {sig}")
    return {"size": size, "tied": tied, **config, "parameters": params, "trainable_parameters": trainable,
            "trainable_variables": len(model.trainable_variables), "signature": sig}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out")
    parser.add_argument("--lm-size", choices=sorted(SIZES), default="110m")
    parser.add_argument("--untied", action="store_true", help="a separate LM head instead of the tied embedding")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    info = export(args.out, args.lm_size, tied=not args.untied, seed=args.seed)
    print(f"{args.lm_size} LM: {info['parameters']:,} parameters", file=sys.stderr)
    print(json.dumps(info))


if __name__ == "__main__":
    main()
