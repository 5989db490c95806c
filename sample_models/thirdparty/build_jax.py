"""SavedModels exported from JAX with jax.experimental.jax2tf (run in its own venv, see README.md)::

    /work/venvs/jax/bin/python sample_models/thirdparty/build_jax.py [OUT_DIR] [NAME...]

Native serialization: each model's forward is one ``XlaCallModule`` op whose StableHLO module is
compiled for float32 only; ``with_gradient=True`` saves the JAX VJP as a ``tf.custom_gradient`` whose
gradient function is another ``XlaCallModule`` (saved with ``experimental_custom_gradients=True``).
Parameters are ``tf.Variable`` s (named ``mlp/w1`` ...) passed into the converted function, the
jax2tf recipe for exporting trainable models. Fixed initial values, no downloads.

Writes OUT_DIR/<name>/ (default: this folder) with truth.json and inputs.npz (see _truth.py);
truth.json also records ``gradient_error``: for every source, the largest relative error of the
loaded model's gradient (its saved custom gradient) against the true derivative computed by JAX on the
plain (not custom_vjp) function at the same inputs and cotangent.
"""

from __future__ import annotations

import importlib.metadata
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import tensorflow as tf
from jax.experimental import jax2tf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _truth import table, write_truth

HERE = os.path.dirname(os.path.abspath(__file__))
LIBRARY = {"name": "jax", "version": jax.__version__, "jaxlib": importlib.metadata.version("jaxlib"),
           "exporter": "jax.experimental.jax2tf, native serialization (XlaCallModule)"}
_SAVE = tf.saved_model.SaveOptions(experimental_custom_gradients=True)
BATCH = 3  # inputs.npz batch size; the signatures accept any batch ("(b, 4)")


# ------------------------------------------------------------------------------------------------
# JAX functions
# ------------------------------------------------------------------------------------------------

def _softplus(z):
    return jnp.logaddexp(z, 0.0)


def _make_act(kind):
    """Softplus with a custom VJP: correct, wrong by a relative 1e-2, or wrong only where z > 2."""
    if kind is None:
        return _softplus

    @jax.custom_vjp
    def act(z):
        return _softplus(z)

    def fwd(z):
        return _softplus(z), z

    def bwd(z, g):
        d = jax.nn.sigmoid(z)
        if kind == "wrong_1e-2":
            d = d * (1.0 + 1e-2)
        elif kind == "wrong_x_gt_2":
            d = jnp.where(z > 2.0, 0.5 * d, d)
        return (g * d,)

    act.defvjp(fwd, bwd)
    return act


@jax.custom_jvp
def _ste_round(z):
    """Rounding whose derivative is the identity's (a straight-through estimator, as quantisation-aware
    training writes it in JAX)."""
    return jnp.round(z)


@_ste_round.defjvp
def _ste_round_jvp(primals, tangents):
    (z,), (t,) = primals, tangents
    return jnp.round(z), t


@jax.custom_vjp
def _shift_wrong(b):
    """The identity, whose custom VJP scales the cotangent by 1.05 (a wrong gradient)."""
    return b


_shift_wrong.defvjp(lambda b: (b, None), lambda _, g: (1.05 * g,))


def ste_model(params, x, shift=lambda b: b, rounding=_ste_round):
    """A fake-quantised layer: tanh(round(4 x @ w) / 4 + b), the rounding with a straight-through estimator."""
    return jnp.tanh(rounding(x @ params["w"] * 4.0) / 4.0 + shift(params["b"]))


def mlp(params, x, act=jnp.tanh):
    h = act(x @ params["w1"] + params["b1"])
    return h @ params["w2"] + params["b2"]


def act_model(params, x, act=_softplus):
    """The custom activation is applied to the input itself, so ``x > 2`` is a region of the input."""
    return act(x) @ params["w"] + params["b"]


def embed_model(params, ids, x):
    """Token-id lookup into a trainable table, mean over the sequence, scaled by x, then a projection."""
    e = params["table"][ids]  # [b, 5, 4]
    return jnp.tanh(e.mean(axis=1) * x) @ params["w"]


def _params(kind):
    rng = np.random.default_rng(42)
    f = lambda *s: rng.normal(0.0, 0.5, size=s).astype(np.float32)  # noqa: E731
    if kind == "mlp":
        return {"w1": f(4, 8), "b1": f(8), "w2": f(8, 2), "b2": f(2)}
    if kind == "emb":
        return {"table": f(20, 4), "w": f(4, 2)}
    return {"w": f(4, 2), "b": f(2)}


# name -> (params kind, JAX function of (params, x), true function (no custom_vjp), x sampler, doc)
MODELS = {
    "jax_mlp": ("mlp", mlp, mlp,
                lambda rng: rng.normal(size=(BATCH, 4)),
                "healthy tanh MLP, JAX's own VJP saved as the gradient"),
    "jax_custom_vjp_ok": ("act", lambda p, x: act_model(p, x, _make_act("ok")), act_model,
                          lambda rng: rng.normal(0.0, 2.0, size=(BATCH, 4)),
                          "softplus with a correct jax.custom_vjp (sigmoid)"),
    "jax_custom_vjp_wrong": ("act", lambda p, x: act_model(p, x, _make_act("wrong_1e-2")), act_model,
                             lambda rng: rng.normal(0.0, 2.0, size=(BATCH, 4)),
                             "softplus whose jax.custom_vjp is wrong by a relative 1e-2 everywhere"),
    "jax_custom_vjp_wrong_x_gt_2": ("act", lambda p, x: act_model(p, x, _make_act("wrong_x_gt_2")),
                                    act_model,
                                    lambda rng: rng.normal(0.0, 2.0, size=(BATCH, 4)),
                                    "softplus whose jax.custom_vjp halves the derivative where x > 2"),
    "jax_stop_gradient_param": ("act", lambda p, x: x @ jax.lax.stop_gradient(p["w"]) + p["b"],
                                lambda p, x: x @ p["w"] + p["b"],
                                lambda rng: rng.normal(size=(BATCH, 4)),
                                "x @ lax.stop_gradient(w) + b: w is cut INSIDE the XlaCallModule; the saved "
                                "gradient returns zeros for w"),
    "jax_ste_param": ("act", ste_model, lambda p, x: ste_model(p, x, rounding=jnp.round),
                      lambda rng: rng.normal(size=(BATCH, 4)),
                      "tanh(round(4 x @ w) / 4 + b) with a straight-through custom_jvp round INSIDE the module: "
                      "w's and x's gradients are the estimator's (the true derivative is zero), b's is exact"),
    "jax_ste_param_wrong_b": ("act", lambda p, x: ste_model(p, x, shift=_shift_wrong),
                              lambda p, x: ste_model(p, x, rounding=jnp.round),
                              lambda rng: rng.normal(size=(BATCH, 4)),
                              "jax_ste_param whose b goes through an identity with a custom_vjp 1.05 times too "
                              "large: the estimator on w and a wrong gradient on b in one module"),
}


EMBEDDING = "jax_embedding"  # (params, ids, x): its own signature, built by _export_embedding
TWO_HEADS = "jax_two_heads"  # (params, x, z) -> (a, c) in one module: built by build_two_heads


def two_heads(params, x, z):
    """Two results of one compiled module, each reading half of the arguments: a = tanh(x @ w), c = z @ v."""
    return jnp.tanh(x @ params["w"]), z @ params["v"]


# ------------------------------------------------------------------------------------------------
# export
# ------------------------------------------------------------------------------------------------

def _export(name, export_dir):
    kind, fn, _, _, _ = MODELS[name]
    params = _params(kind)
    module = tf.Module()
    module.params = {k: tf.Variable(v, name=f"{'mlp' if kind == 'mlp' else 'act'}/{k}")
                     for k, v in params.items()}
    converted = jax2tf.convert(fn, with_gradient=True, polymorphic_shapes=[None, "(b, 4)"])

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")], autograph=False)
    def serve(x):
        y = converted(module.params, x)
        return {"y": y, "loss": tf.reduce_mean(tf.square(y))}

    module.serve = serve
    tf.saved_model.save(module, export_dir,
                        signatures={"serving_default": serve.get_concrete_function()}, options=_SAVE)


def _export_embedding(export_dir):
    """jax2tf model with an int32 ``ids`` input next to a float ``x``.

    JAX's VJP gives integer arguments a float0 cotangent; jax2tf saves it as a **bool** zeros tensor, so
    the saved gradient function returns a tensor (dtype bool) for the int32 input instead of None:
    output_signature [None, table: float32, w: float32, ids: bool, x: float32].
    """
    module = tf.Module()
    module.params = {k: tf.Variable(v, name=f"emb/{k}") for k, v in _params("emb").items()}
    converted = jax2tf.convert(embed_model, with_gradient=True,
                               polymorphic_shapes=[None, "(b, 5)", "(b, 4)"])

    @tf.function(input_signature=[tf.TensorSpec([None, 5], tf.int32, name="ids"),
                                  tf.TensorSpec([None, 4], tf.float32, name="x")], autograph=False)
    def serve(ids, x):
        return {"y": converted(module.params, ids, x)}

    module.serve = serve
    tf.saved_model.save(module, export_dir,
                        signatures={"serving_default": serve.get_concrete_function()}, options=_SAVE)


def build_embedding(out_dir=HERE):
    path = os.path.join(out_dir, EMBEDDING)
    _export_embedding(path)
    rng = np.random.default_rng(8)
    ids = rng.integers(0, 20, size=(BATCH, 5)).astype(np.int32)
    x = rng.normal(size=(BATCH, 4)).astype(np.float32)
    doc = write_truth(path, {"serving_default": {"ids": (ids, "token ids in [0, 20)"),
                                                 "x": (x, "real, N(0, 1)")}},
                      LIBRARY, os.path.basename(__file__),
                      notes="jax2tf embedding lookup: the saved gradient returns a bool tensor for int32 ids")
    return path, doc


def build_two_heads(out_dir=HERE):
    """One XlaCallModule with two results: a reads x and w only, c reads z and v only, so x, w -> c and
    z, v -> a have no path although every pair runs through the same op."""
    path = os.path.join(out_dir, TWO_HEADS)
    rng = np.random.default_rng(42)
    module = tf.Module()
    module.params = {k: tf.Variable(rng.normal(0.0, 0.5, size=(4, 2)).astype(np.float32), name=f"heads/{k}")
                     for k in ("w", "v")}
    converted = jax2tf.convert(two_heads, with_gradient=True, polymorphic_shapes=[None, "(b, 4)", "(b, 4)"])

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x"),
                                  tf.TensorSpec([None, 4], tf.float32, name="z")], autograph=False)
    def serve(x, z):
        a, c = converted(module.params, x, z)
        return {"a": a, "c": c}

    module.serve = serve
    tf.saved_model.save(module, path, signatures={"serving_default": serve.get_concrete_function()}, options=_SAVE)
    data = np.random.default_rng(9)
    doc = write_truth(path, {"serving_default": {
        "x": (data.normal(size=(BATCH, 4)).astype(np.float32), "real, N(0, 1)"),
        "z": (data.normal(size=(BATCH, 4)).astype(np.float32), "real, N(0, 1)")}},
        LIBRARY, os.path.basename(__file__), notes=build_two_heads.__doc__.strip().splitlines()[0])
    return path, doc


def _gradient_error(name, export_dir, x):
    """Relative error of the loaded model's gradients against JAX's derivative of the true function."""
    kind, _, true_fn, _, _ = MODELS[name]
    params = _params(kind)
    loaded = tf.saved_model.load(export_dir)
    sig = loaded.signatures["serving_default"]
    rng = np.random.default_rng(0)
    ybar = rng.normal(size=(x.shape[0], 2)).astype(np.float32)

    def true_loss(p, xx):
        return jnp.sum(true_fn(p, xx) * ybar)

    gp, gx = jax.grad(true_loss, argnums=(0, 1))(params, jnp.asarray(x))
    truth = {"x": np.asarray(gx)}
    truth.update({f"{'mlp' if kind == 'mlp' else 'act'}/{k}": np.asarray(v) for k, v in gp.items()})
    out = {}
    xt = tf.constant(x)
    for var in sig.trainable_variables + (None,):
        with tf.GradientTape() as tape:
            target = xt if var is None else var
            tape.watch(target)
            loss = tf.reduce_sum(sig(x=xt)["y"] * ybar)
        g = np.asarray(tape.gradient(loss, target))
        key = "x" if var is None else var.name.split(":")[0]
        ref = truth[key]
        out[key] = float(np.max(np.abs(g - ref)) / max(np.max(np.abs(ref)), 1e-30))
    return out


def build(name, out_dir=HERE):
    path = os.path.join(out_dir, name)
    _export(name, path)
    x = MODELS[name][3](np.random.default_rng(7)).astype(np.float32)
    domain = ("real, N(0, 2) (some entries > 2)" if name.startswith("jax_custom_vjp")
              else "real, N(0, 1)")
    err = _gradient_error(name, path, x)
    doc = write_truth(path, {"serving_default": {"x": (x, domain)}}, LIBRARY,
                      os.path.basename(__file__), notes=MODELS[name][4],
                      extra={"gradient_error": {
                          "what": "max |saved gradient - true gradient| / max |true gradient| of "
                                  "sum(y * cotangent), cotangent N(0,1) from default_rng(0), at inputs.npz",
                          "y": err}})
    return path, doc


if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else HERE
    for n in (sys.argv[2:] or list(MODELS) + [EMBEDDING, TWO_HEADS]):
        if n in (EMBEDDING, TWO_HEADS):
            p, d = (build_embedding if n == EMBEDDING else build_two_heads)(out)
            print(p, table(d))
            continue
        p, d = build(n, out)
        print(p, table(d), d["gradient_error"]["y"])
