"""Build the small SavedModels that gradaudit is tested and demonstrated on.

Every model is built in code from fixed values (no downloads, no pretrained weights). Use it as a module::

    from sample_models.build import MODELS, build, build_all, build_wrong_gradient
    path = build("classifier_argmax", tmp_dir)      # writes tmp_dir/classifier_argmax

or as a script::

    python sample_models/build.py [OUT_DIR]          # default OUT_DIR: the sample_models folder

Conventions
-----------
* ``tf.Module`` models are saved with ``tf.saved_model.save(..., signatures={"serving_default": ...},
  options=SaveOptions(experimental_custom_gradients=True))``; every signature has a fully specified
  ``input_signature`` of named ``tf.TensorSpec`` s and returns a dict, so input and output keys are
  meaningful. Keras models (``mlp``, ``cnn``) are written with ``model.export`` (signatures ``serve`` and
  ``serving_default``; input names come from the ``keras.Input`` names, output keys are Keras' own,
  ``output_0``).
* Variables get explicit names (``tf.Variable(..., name="dense/kernel")``); that name is the
  ``SavedVariable.name`` in the object graph. Initial values come from ``numpy.random.default_rng(seed)``
  or literal constants, so the weights are the same on every build. (Function names such as
  ``__inference___call___123`` depend on how many functions the process traced before, so the
  ``saved_model.pb`` bytes are not identical between a single ``build`` and ``build_all``.)
* Each builder's docstring says what it demonstrates and what gradaudit is expected to report.
  "Sources" are float inputs and trainable variables; integer / bool / string inputs are
  non-differentiable sources and are never a finding by themselves. "Connected" means a gradient path
  exists from the source to the output; "blocked by X" means every path is cut, X being the op type that
  cuts it.
"""

from __future__ import annotations

import functools
import os
import sys
import time
from collections.abc import Callable

import numpy as np
import tensorflow as tf

HERE = os.path.dirname(os.path.abspath(__file__))

_SAVE_OPTIONS = tf.saved_model.SaveOptions(experimental_custom_gradients=True)


# --------------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------------

def _spec(shape, dtype=tf.float32, name="x"):
    return tf.TensorSpec(shape, dtype, name=name)


def _const(shape, seed, scale=0.5):
    """Deterministic float32 initial value."""
    rng = np.random.default_rng(seed)
    return tf.constant(rng.normal(0.0, scale, size=shape).astype(np.float32))


def _var(shape, seed, name, trainable=True, scale=0.5):
    return tf.Variable(_const(shape, seed, scale), name=name, trainable=trainable)


def _save(module: tf.Module, export_dir: str, fn=None) -> None:
    """Save ``module`` with its ``__call__`` (or ``fn``) as the only signature, ``serving_default``."""
    fn = fn if fn is not None else module.__call__
    signatures = {"serving_default": fn.get_concrete_function()}
    tf.saved_model.save(module, export_dir, signatures=signatures, options=_SAVE_OPTIONS)


def _module_with_call(call, input_signature, **attrs) -> tf.Module:
    """A tf.Module holding ``attrs`` (variables, ...) whose ``__call__`` is ``call(self, *inputs)``.

    ``call`` must return a dict of named outputs.
    """
    # autograph=False: control flow is written with explicit tf.while_loop / tf.cond / tf.switch_case,
    # and AutoGraph cannot parse the lambdas used by ``_stateless`` (it warns and runs them as-is).
    cls = type("SampleModule", (tf.Module,), {
        "__call__": tf.function(call, input_signature=input_signature, autograph=False),
    })
    m = cls()
    for k, v in attrs.items():
        setattr(m, k, v)
    return m


def _stateless(fn, input_signature, export_dir):
    """Save a model whose signature is ``fn(*inputs) -> dict`` and has no variables."""
    m = _module_with_call(lambda self, *args: fn(*args), input_signature)
    _save(m, export_dir)


# --------------------------------------------------------------------------------------------------
# 1-3: ops with no useful gradient on the path
# --------------------------------------------------------------------------------------------------

def classifier_argmax(export_dir: str) -> None:
    """Softmax classifier with a hard class output (seed 003's "is my graph differentiable?").

    Input ``x`` float32 [None,4]; trainable ``dense/kernel`` [4,3], ``dense/bias`` [3].
    Outputs ``probs`` = softmax(x @ W + b) and ``cls`` = float(argmax(probs, -1)).

    Expected static verdict:
      * x, dense/kernel, dense/bias -> probs: connected.
      * x, dense/kernel, dense/bias -> cls: blocked by ``ArgMax`` (gradient registered but returns
        None; the Cast back to float32 does not reconnect it). ``cls`` is a float output whose gradient
        is silently zero / None.
    Numeric: gradient of ``cls`` is None/zero; finite differences are zero almost everywhere.
    Note: the gradient of sum(probs) is exactly zero, so the numeric check must project on a random
    cotangent.
    """
    def call(self, x):
        logits = tf.matmul(x, self.kernel) + self.bias
        probs = tf.nn.softmax(logits, axis=-1)
        cls = tf.cast(tf.argmax(probs, axis=-1), tf.float32)
        return {"probs": probs, "cls": cls}

    m = _module_with_call(call, [_spec([None, 4])],
                          kernel=_var([4, 3], 1, "dense/kernel"),
                          bias=tf.Variable(tf.constant([0.1, -0.2, 0.05]), name="dense/bias"))
    _save(m, export_dir)


def numpy_function(export_dir: str) -> None:
    """Seed 002: ``y = tf.numpy_function(np.sinh, [x], tf.float32) + x``.

    Input ``x`` float32 [None]; output ``y`` (static shape set with ``set_shape``).

    Expected static verdict: x -> y connected, but only through the ``+ x`` branch; the ``PyFunc``
    path (registered as NotDifferentiable: registry lookup returns None) is cut, so the gradient is
    silently wrong (1 instead of cosh(x) + 1). gradaudit should report the ``PyFunc`` cut as a partial
    cut of x -> y (a path exists, another path is cut).
    Numeric: in a fresh process the loaded model cannot run (the Python callback is not saved: "Could
    not find callback with key=pyfunc_0"); gradaudit must report it as not runnable rather than crash.
    Caveat for tests: in the process that built the model the callback is still registered, so the
    loaded model runs there and its gradient is 1 instead of cosh(x) + 1 (seed 002: gradient error
    ~1.1 at x = 3 as measured by compute_gradient_error).
    """
    def fn(x):
        s = tf.numpy_function(np.sinh, [x], tf.float32)
        s.set_shape(x.shape)
        return {"y": s + x}

    _stateless(fn, [_spec([None])], export_dir)


def quantize_int(export_dir: str) -> None:
    """Float -> int -> float quantisation: ``q = cast(cast(x*127, int32), float32) / 127 * scale``.

    Input ``x`` float32 [None]; trainable ``scale`` (scalar, 1.5); output ``q``.

    Expected static verdict:
      * x -> q: blocked by ``Cast`` (to int32: integer path; no gradient flows through integer
        tensors).
      * scale -> q: connected.
    Numeric: analytic d q / d x is None/zero; finite differences are zero except at step edges.
    """
    def call(self, x):
        xi = tf.cast(x * 127.0, tf.int32)
        q = tf.cast(xi, tf.float32) / 127.0 * self.scale
        return {"q": q}

    m = _module_with_call(call, [_spec([None])], scale=tf.Variable(1.5, name="scale"))
    _save(m, export_dir)


# --------------------------------------------------------------------------------------------------
# 4-8: the numeric seeds (000, 001, 003)
# --------------------------------------------------------------------------------------------------

def log1pexp_naive(export_dir: str) -> None:
    """Seed 001, naive: ``y = tf.math.log(1 + tf.exp(x))``.

    Input ``x`` float32 [None]; output ``y``.

    Expected static verdict: x -> y connected (Exp, AddV2, Log).
    Numeric: exp overflows to inf from x ~ 88.7 in float32: y = inf and dy/dx = NaN (at x = 100).
    Accurate (1 / (1 + e^-x)) for moderate x.
    """
    def fn(x):
        return {"y": tf.math.log(1.0 + tf.exp(x))}

    _stateless(fn, [_spec([None])], export_dir)


def log1pexp_custom(export_dir: str) -> None:
    """Seed 001, ``@tf.custom_gradient`` version: grad = dy * (1 - 1/(1+e)).

    Input ``x`` float32 [None]; output ``y``.

    Expected static verdict: x -> y connected through a custom gradient (``IdentityN`` with
    ``_gradient_op_type``; its gradient function is in ``library.registered_gradients``).
    Numeric: the gradient at x = 100 is 1.0 (finite) although the forward value y is still inf
    (the forward is unchanged; only the gradient is stabilised). The custom gradient agrees with finite
    differences for moderate x.
    Caveat (TF 2.21, also in-process with any tf.function): under a *persistent* GradientTape the
    gradient at x = 100 is NaN again. The function then also returns its intermediates, their zero
    cotangents flow through Exp's own gradient (0 * inf = NaN) and are added to the custom gradient.
    Use non-persistent tapes (cf. tensorflow/tensorflow#60468).
    """
    @tf.custom_gradient
    def log1pexp(x):
        e = tf.exp(x)

        def grad(dy):
            return dy * (1 - 1 / (1 + e))

        return tf.math.log(1 + e), grad

    _stateless(lambda x: {"y": log1pexp(x)}, [_spec([None])], export_dir)


def _ratio(export_dir: str, stable: bool) -> None:
    @tf.custom_gradient
    def neg_ratio(a, b):
        f = -a / b

        def grad(dy):
            da = -1.0 / b * dy
            db = (a / b) / b * dy if stable else a / b ** 2 * dy
            return da, db

        return f, grad

    _stateless(lambda a, b: {"f": neg_ratio(a, b)},
               [_spec([None], name="a"), _spec([None], name="b")], export_dir)


def ratio_naive(export_dir: str) -> None:
    """Seed 000: ``f = -a/b`` with a hand-written custom gradient, d f/d b = ``a / b**2 * dy``.

    Inputs ``a``, ``b`` float32 [None]; output ``f``.

    Expected static verdict: a -> f and b -> f connected through a custom gradient (IdentityN).
    Numeric: at a = b = 1e-20 (float32), b**2 underflows to 0 and d f/d b = inf (true value 1e20);
    for a = b = 1e20, b**2 overflows and the gradient is 0. Correct for ordinary values (e.g. a, b ~ 1).
    """
    _ratio(export_dir, stable=False)


def ratio_stable(export_dir: str) -> None:
    """Seed 000, stable custom gradient: d f/d b = ``(a / b) / b * dy``.

    Inputs ``a``, ``b`` float32 [None]; output ``f``.

    Expected static verdict: a, b -> f connected (custom gradient, IdentityN).
    Numeric: finite and correct also at a = b = 1e-20 (d f/d b = 1e20) and at a = b = 1e20 (1e-20).
    """
    _ratio(export_dir, stable=True)


def normal_logpdf(export_dir: str) -> None:
    """Seed 003: Normal log-density without the constant, summed over the last axis.

    ``logp = reduce_sum(-(x - loc)**2 / (2 * scale**2), axis=-1)`` with constant
    loc = [0, 0.5, -0.5], scale = [0.5, 1.0, 1.5] (no tfp). Input ``x`` float32 [None,3]; output ``logp``
    [None].

    Expected static verdict: x -> logp connected (no variables).
    Numeric: the function is quadratic, so central differences are exact up to rounding: any error
    comes from float32 rounding, and it *grows* as delta shrinks (seed 003: ~1e-7 at delta 2^-5,
    ~7e-5 at delta 2^-13). gradaudit must not flag this as a wrong gradient (choose delta sensibly or
    evaluate in float64).
    """
    loc = tf.constant([0.0, 0.5, -0.5])
    scale = tf.constant([0.5, 1.0, 1.5])

    def fn(x):
        return {"logp": tf.reduce_sum(-tf.pow(x - loc, 2) / (2 * scale ** 2), axis=-1)}

    _stateless(fn, [_spec([None, 3])], export_dir)


# --------------------------------------------------------------------------------------------------
# 9-10: clean Keras models
# --------------------------------------------------------------------------------------------------

def mlp(export_dir: str) -> None:
    """Clean Keras MLP: Input(8, name="x") -> Dense(16, relu) -> Dense(3), written with ``model.export``.

    Expected static verdict: every trainable variable (2 kernels, 2 biases) and x -> output_0
    connected; no findings. (ReLU zeroes some gradients locally but is not a cut.)
    Numeric: gradients agree with finite differences (away from ReLU kinks).
    Note: the object graph holds 8 variable nodes for the 4 variables (see ``cnn``); the 4 duplicates
    under ``_all_variables`` are not bound to any function and are not disconnected variables.
    """
    import keras
    keras.utils.set_random_seed(0)
    inp = keras.Input(shape=(8,), name="x")
    h = keras.layers.Dense(16, activation="relu", name="dense_1")(inp)
    out = keras.layers.Dense(3, name="dense_2")(h)
    model = keras.Model(inp, out, name="mlp")
    model.export(export_dir, verbose=False)


def cnn(export_dir: str) -> None:
    """Clean Keras CNN: Input(16,16,3, name="image") -> Conv2D(4, 3) -> BatchNormalization -> ReLU ->
    MaxPooling2D -> Flatten -> Dense(4), written with ``model.export``.

    Expected static verdict: image, conv kernel/bias, bn gamma/beta, dense kernel/bias -> output_0
    connected; the BN moving mean/variance are non-trainable variables (connected in inference mode
    but not trainable: not a finding). No cuts.
    Numeric: gradients agree with finite differences (MaxPool/ReLU kinks aside).
    Notes: Keras 3 exports inference-mode BN as plain Rsqrt/Mul/Sub math (no FusedBatchNormV3 op).
    Like every ``model.export``, the object graph holds each variable twice (nodes reachable from
    ``variables`` and again from ``_all_variables``, same names); only the first set is in the
    functions' ``bound_inputs``. The duplicates must not be reported as disconnected variables.
    """
    import keras
    keras.utils.set_random_seed(0)
    inp = keras.Input(shape=(16, 16, 3), name="image")
    h = keras.layers.Conv2D(4, 3, name="conv")(inp)
    h = keras.layers.BatchNormalization(name="bn")(h)
    h = keras.layers.ReLU(name="relu")(h)
    h = keras.layers.MaxPooling2D(2, name="pool")(h)
    h = keras.layers.Flatten(name="flatten")(h)
    out = keras.layers.Dense(4, name="dense")(h)
    model = keras.Model(inp, out, name="cnn")
    model.export(export_dir, verbose=False)


# --------------------------------------------------------------------------------------------------
# 11-15: control flow, nested functions, embeddings
# --------------------------------------------------------------------------------------------------

def while_loop(export_dir: str) -> None:
    """``tf.while_loop`` applying ``h = tanh(h @ w)`` 3 times (int32 loop counter i).

    Input ``x`` float32 [None,4]; trainable ``w`` [4,4]; output ``y``.

    Expected static verdict: x, w -> y connected through the ``While`` body function (``While``, not
    ``StatelessWhile``, because the body reads the resource variable; the int32 counter is an integer
    loop variable: not a source and not a cut).
    Numeric: gradients agree with finite differences.
    Caveat (TF 2.21): after loading, a *persistent* GradientTape around the call raises "ValueError:
    Internal error: Tried to take gradients (or similar) of a variable without handle data" (for x and
    w alike); a non-persistent tape works.
    """
    def call(self, x):
        def cond(i, h):
            return i < 3

        def body(i, h):
            return i + 1, tf.tanh(tf.matmul(h, self.w))

        _, h = tf.while_loop(cond, body, [tf.constant(0, tf.int32), x])
        return {"y": h}

    m = _module_with_call(call, [_spec([None, 4])], w=_var([4, 4], 11, "w"))
    _save(m, export_dir)


def cond(export_dir: str) -> None:
    """``tf.cond`` on a runtime predicate ``reduce_sum(x) > 0``; both branches differentiable.

    Input ``x`` float32 [None,4]; trainable ``w`` [4,2]; output ``y`` = tanh(x@w) if sum(x) > 0 else
    2*sigmoid(x@w).

    Expected static verdict: x, w -> y connected through both branches of the ``StatelessIf``
    (the bool predicate is not a cut: it selects, it does not carry the value).
    Numeric: gradients agree with finite differences away from sum(x) = 0.
    """
    def call(self, x):
        z = tf.matmul(x, self.w)
        y = tf.cond(tf.reduce_sum(x) > 0,
                    lambda: tf.tanh(z),
                    lambda: 2.0 * tf.sigmoid(z))
        return {"y": y}

    m = _module_with_call(call, [_spec([None, 4])], w=_var([4, 2], 12, "w"))
    _save(m, export_dir)


def case(export_dir: str) -> None:
    """``tf.switch_case`` on an int32 scalar input ``branch`` with three branches.

    Inputs ``x`` float32 [None,4], ``branch`` int32 [] (0, 1 or 2); trainable ``w`` [4,2];
    output ``y``: branch 0 = x@w, branch 1 = tanh(x@w), branch 2 = round(x@w).

    Expected static verdict: x, w -> y connected (via branches 0 and 1 of the ``StatelessCase``);
    branch 2 is cut by ``Round`` (a partial cut: the gradient is None/zero only when branch == 2).
    ``branch`` is an integer input: a non-differentiable source, not a finding.
    Numeric: with branch = 0 or 1 gradients agree with finite differences; with branch = 2 the gradient
    is zero.
    """
    def call(self, x, branch):
        z = tf.matmul(x, self.w)
        y = tf.switch_case(branch, [lambda: z, lambda: tf.tanh(z), lambda: tf.round(z)])
        return {"y": y}

    m = _module_with_call(call, [_spec([None, 4]), _spec([], tf.int32, name="branch")],
                          w=_var([4, 2], 13, "w"))
    _save(m, export_dir)


def nested_function(export_dir: str) -> None:
    """``__call__`` calls a ``tf.function`` which calls a third one; everything smooth.

    Input ``x`` float32 [None,4]; trainable ``w`` [4,4] (read in the innermost function); output ``y``.

    Expected static verdict: x, w -> y connected through two levels of ``StatefulPartitionedCall``
    (the variable is captured by the innermost function and passed down as an extra argument).
    Numeric: gradients agree with finite differences.
    """
    class Nested(tf.Module):
        def __init__(self):
            super().__init__()
            self.w = _var([4, 4], 14, "w")

        @tf.function
        def inner(self, h):
            return tf.tanh(tf.matmul(h, self.w))

        @tf.function
        def middle(self, h):
            return tf.sigmoid(self.inner(h)) * 2.0 + h

        @tf.function(input_signature=[_spec([None, 4])])
        def __call__(self, x):
            return {"y": tf.reduce_sum(self.middle(x) ** 2, axis=-1)}

    _save(Nested(), export_dir)


def embedding(export_dir: str) -> None:
    """Masked mean of embedding rows.

    Inputs ``ids`` int32 [None,5] (values in [0, 20)), ``mask`` bool [None,5]; trainable
    ``embedding/table`` [20,8]; output ``pooled`` [None,8] = sum(table[ids] * mask) / max(sum(mask), 1).

    Expected static verdict: embedding/table -> pooled connected (``ResourceGather``; its gradient is
    sparse, an IndexedSlices). ``ids`` and ``mask`` are integer/bool inputs: non-differentiable sources,
    not findings.
    Numeric: gradient w.r.t. the table agrees with finite differences (rows not referenced get zero).
    """
    def call(self, ids, mask):
        rows = tf.gather(self.table, ids)                  # [B,5,8]
        m = tf.cast(mask, tf.float32)[..., None]           # [B,5,1]
        total = tf.reduce_sum(rows * m, axis=1)
        count = tf.maximum(tf.reduce_sum(m, axis=1), 1.0)
        return {"pooled": total / count}

    m = _module_with_call(call, [_spec([None, 5], tf.int32, name="ids"),
                                 _spec([None, 5], tf.bool, name="mask")],
                          table=_var([20, 8], 15, "embedding/table"))
    _save(m, export_dir)


# --------------------------------------------------------------------------------------------------
# 16-19: intentional cuts, straight-through estimators, randomness
# --------------------------------------------------------------------------------------------------

def stop_gradient(export_dir: str) -> None:
    """``y = tf.stop_gradient(x @ w1) @ w2``.

    Input ``x`` float32 [None,4]; trainable ``w1`` [4,4], ``w2`` [4,2]; output ``y``.

    Expected static verdict:
      * x -> y, w1 -> y: blocked by ``StopGradient``.
      * w2 -> y: connected.
    Finding: trainable ``w1`` receives no gradient from any output (it will never train).
    """
    def call(self, x):
        h = tf.stop_gradient(tf.matmul(x, self.w1))
        return {"y": tf.matmul(h, self.w2)}

    m = _module_with_call(call, [_spec([None, 4])],
                          w1=_var([4, 4], 161, "w1"), w2=_var([4, 2], 162, "w2"))
    _save(m, export_dir)


def ste(export_dir: str) -> None:
    """Straight-through estimator: ``y = (x + tf.stop_gradient(tf.round(x) - x)) * v``.

    Input ``x`` float32 [None,4]; trainable ``v`` [4]; output ``y``.

    Expected static verdict: x -> y and v -> y connected (x through the identity branch of the
    AddV2; the StopGradient/Round branch is an intentional cut that must NOT produce a
    zero-gradient / blocked finding, since another path carries the gradient).
    Numeric: d y/d x = v by design while the forward is piecewise constant in x (finite differences
    give 0 or spikes): a mismatch that is intentional (STE); v's gradient (round(x)) agrees with finite
    differences.
    """
    def call(self, x):
        q = x + tf.stop_gradient(tf.round(x) - x)
        return {"y": q * self.v}

    m = _module_with_call(call, [_spec([None, 4])],
                          v=tf.Variable(tf.constant([1.0, 0.5, -0.75, 2.0]), name="v"))
    _save(m, export_dir)


def fake_quant(export_dir: str) -> None:
    """``y = tf.quantization.fake_quant_with_min_max_args(x, min=-1, max=1) * v``.

    Input ``x`` float32 [None,4]; trainable ``v`` [4]; output ``y``.

    Expected static verdict: x -> y and v -> y connected (``FakeQuantWithMinMaxArgs`` has a registered
    straight-through gradient, ``FakeQuantWithMinMaxArgsGradient``: 1 inside [min, max], 0 outside).
    Numeric: for x outside [-1, 1] d y/d x is 0 (clipped); inside, the analytic gradient is v while the
    forward is a staircase (256 levels), so finite differences with small delta disagree by design.
    """
    def call(self, x):
        q = tf.quantization.fake_quant_with_min_max_args(x, min=-1.0, max=1.0)
        return {"y": q * self.v}

    m = _module_with_call(call, [_spec([None, 4])],
                          v=tf.Variable(tf.constant([1.0, 0.5, -0.75, 2.0]), name="v"))
    _save(m, export_dir)


def dropout(export_dir: str) -> None:
    """Dropout active at inference: ``y = tf.nn.dropout(x @ w, rate=0.5, seed=1234)``.

    Input ``x`` float32 [None,4]; trainable ``w`` [4,4]; output ``y``. The signature contains a
    stateful random op (``RandomUniform``), so two calls with the same input give different outputs.

    Expected static verdict: x, w -> y connected (through the Mul/SelectV2 with the random mask; the
    ``RandomUniform`` only feeds the mask and is not on a source's path). Finding: stateful random op
    in the signature (non-deterministic forward).
    Numeric: finite differences are meaningless (each forward draws a new mask); gradaudit should detect
    the non-determinism (repeat the forward) and skip/flag the numeric check instead of reporting a
    wrong gradient.
    """
    def call(self, x):
        return {"y": tf.nn.dropout(tf.matmul(x, self.w), rate=0.5, seed=1234)}

    m = _module_with_call(call, [_spec([None, 4])], w=_var([4, 4], 19, "w"))
    _save(m, export_dir)


# --------------------------------------------------------------------------------------------------
# 20-23: wrong gradients, unused variables, ops without a gradient
# --------------------------------------------------------------------------------------------------

def build_wrong_gradient(out_dir: str, rel_error: float) -> str:
    """Write, at ``out_dir`` itself, ``y = sin(x)`` with a custom gradient ``dy * cos(x) * (1 + rel_error)``.

    Input ``x`` float32 [None]; output ``y``. Returns ``out_dir``.

    Expected static verdict: x -> y connected (custom gradient, IdentityN); nothing static is wrong.
    Numeric: the analytic gradient is off by a relative ``rel_error`` wherever cos(x) != 0.
    rel_error = 1 (factor 2, ``wrong_custom_gradient_2x``) must be caught in float32;
    rel_error = 1e-4 (``wrong_custom_gradient``) is below float32 central-difference noise for typical
    deltas and is only reliably caught in float64 (or with a carefully chosen delta). This is the
    sensitivity test of the numeric checker.
    """
    factor = 1.0 + float(rel_error)

    @tf.custom_gradient
    def wrong_sin(x):
        def grad(dy):
            return dy * tf.cos(x) * factor

        return tf.sin(x), grad

    _stateless(lambda x: {"y": wrong_sin(x)}, [_spec([None])], out_dir)
    return out_dir


def disconnected_variable(export_dir: str) -> None:
    """A module with a trainable variable ``unused`` [3] that ``__call__`` never reads, and ``w`` [4,2].

    Input ``x`` float32 [None,4]; output ``y`` = x @ w.

    Expected static verdict: x, w -> y connected; unused -> y disconnected (not even captured by the
    signature function: absent from its ``bound_inputs``). Finding: trainable variable that receives no
    gradient from any output.
    """
    def call(self, x):
        return {"y": tf.matmul(x, self.w)}

    m = _module_with_call(call, [_spec([None, 4])],
                          w=_var([4, 2], 21, "w"),
                          unused=tf.Variable(tf.constant([1.0, 2.0, 3.0]), name="unused"))
    _save(m, export_dir)


def no_gradient_op(export_dir: str) -> None:
    """A float op with NO registered gradient on the path: ``AdjustContrastv2`` (``tf.image.adjust_contrast``).

    ``ops._gradient_registry.lookup("AdjustContrastv2")`` raises LookupError in TF 2.21.
    Input ``x`` float32 [None,12] (reshaped to [None,2,2,3] images); trainable ``w_in`` [12] (before the
    op) and ``w_out`` [3] (after); output ``y`` [None,12] = adjust_contrast(reshape(x * w_in), 2) * w_out.

    Expected static verdict:
      * x -> y, w_in -> y: blocked by ``AdjustContrastv2`` (no gradient registered: LookupError).
      * w_out -> y: connected statically.
    Numeric: calling the loaded signature under a GradientTape that watches anything raises
    LookupError from the call itself ("No gradient defined for operation ... AdjustContrastv2"), so
    even w_out's gradient cannot be computed by TF: gradaudit should report the error, not crash.
    The forward pass runs after loading.
    """
    def call(self, x):
        img = tf.reshape(x * self.w_in, [-1, 2, 2, 3])
        out = tf.image.adjust_contrast(img, 2.0) * self.w_out
        return {"y": tf.reshape(out, [-1, 12])}

    m = _module_with_call(call, [_spec([None, 12])],
                          w_in=_var([12], 221, "w_in"),
                          w_out=tf.Variable(tf.constant([1.0, 0.5, 2.0]), name="w_out"))
    _save(m, export_dir)


def not_differentiable_op(export_dir: str) -> None:
    """A float->float op registered as ``tf.NotDifferentiable``: ``HSVToRGB`` (``tf.image.hsv_to_rgb``).

    ``ops._gradient_registry.lookup("HSVToRGB")`` returns None in TF 2.21. (``NextAfter`` is NOT usable
    here: it has a registered gradient in TF 2.21.)
    Input ``x`` float32 [None,3]; trainable ``w_in`` [3] (before the op) and ``w_out`` [3] (after);
    output ``y`` = hsv_to_rgb(sigmoid(x * w_in)) * w_out.

    Expected static verdict:
      * x -> y, w_in -> y: blocked by ``HSVToRGB`` (registered NotDifferentiable).
      * w_out -> y: connected.
    Numeric: TF returns None for x / w_in (silently), while finite differences are non-zero: a real
    mismatch. w_out's gradient agrees with finite differences.
    """
    def call(self, x):
        hsv = tf.sigmoid(x * self.w_in)
        return {"y": tf.image.hsv_to_rgb(hsv) * self.w_out}

    m = _module_with_call(call, [_spec([None, 3])],
                          w_in=tf.Variable(tf.constant([1.0, -0.5, 0.75]), name="w_in"),
                          w_out=tf.Variable(tf.constant([1.0, 0.5, 2.0]), name="w_out"))
    _save(m, export_dir)


# --------------------------------------------------------------------------------------------------
# 24-27: NaN / inf gradients with finite forward values, and their safe versions
# --------------------------------------------------------------------------------------------------

def unstable_norm(export_dir: str) -> None:
    """``y = tf.norm(x, axis=-1)``. Input ``x`` float32 [None,4]; output ``y`` [None].

    Expected static verdict: x -> y connected.
    Numeric: the gradient is NaN for a zero row (0/0 in the sqrt gradient) while y = 0 is finite.
    """
    _stateless(lambda x: {"y": tf.norm(x, axis=-1)}, [_spec([None, 4])], export_dir)


def safe_norm(export_dir: str) -> None:
    """``y = tf.sqrt(tf.reduce_sum(x*x, -1) + 1e-12)``. Input ``x`` float32 [None,4]; output ``y``.

    Expected static verdict: x -> y connected.
    Numeric: finite gradient everywhere (0 at a zero row); agrees with finite differences away from 0.
    """
    _stateless(lambda x: {"y": tf.sqrt(tf.reduce_sum(x * x, axis=-1) + 1e-12)},
               [_spec([None, 4])], export_dir)


def where_nan(export_dir: str) -> None:
    """``y = tf.where(x > 0, tf.math.log(x), 0.)``. Input ``x`` float32 [None]; output ``y``.

    Expected static verdict: x -> y connected (SelectV2, Log).
    Numeric: at x = 0 the forward is 0 (finite) but the gradient is NaN (0 * inf from the unselected
    Log branch).
    """
    _stateless(lambda x: {"y": tf.where(x > 0, tf.math.log(x), 0.0)}, [_spec([None])], export_dir)


def where_safe(export_dir: str) -> None:
    """Double-where: ``safe = tf.where(x > 0, x, 1.); y = tf.where(x > 0, tf.math.log(safe), 0.)``.

    Input ``x`` float32 [None]; output ``y``.

    Expected static verdict: x -> y connected.
    Numeric: finite gradient everywhere (0 for x <= 0).
    """
    def fn(x):
        pos = x > 0
        safe = tf.where(pos, x, 1.0)
        return {"y": tf.where(pos, tf.math.log(safe), 0.0)}

    _stateless(fn, [_spec([None])], export_dir)


def reciprocal_ratio(export_dir: str) -> None:
    """``f = a * tf.math.reciprocal(b)``. Inputs ``a``, ``b`` float32 [None]; output ``f``.

    Expected static verdict: a, b -> f connected.
    Numeric: at a = b = 1e-20, f = 1 but d f/d b = -a * (1/b)**2 overflows: (1/b)**2 = 1e40 -> inf,
    so the gradient is -inf (true value -1e20). This is how seed 000's failure still appears in TF 2.21
    (plain ``a / b`` is differentiated stably).
    """
    _stateless(lambda a, b: {"f": a * tf.math.reciprocal(b)},
               [_spec([None], name="a"), _spec([None], name="b")], export_dir)


def log_sigmoid_naive(export_dir: str) -> None:
    """``y = log(sigmoid(x))``. Input ``x`` float32 [None]; output ``y``.

    Expected static verdict: x -> y connected.
    Numeric: for x <~ -104 sigmoid underflows to 0: y = -inf and the gradient is NaN/inf (true
    gradient ~1); stable alternative: ``tf.math.log_sigmoid``.
    """
    _stateless(lambda x: {"y": tf.math.log(tf.sigmoid(x))}, [_spec([None])], export_dir)


def log_softmax_naive(export_dir: str) -> None:
    """``y = log(softmax(x))``. Input ``x`` float32 [None,5]; output ``y`` [None,5].

    Expected static verdict: x -> y connected.
    Numeric: with logits spread by more than ~104 (e.g. [0, 200, 0, 0, 0]) some softmax entries
    underflow to 0 and the gradient is NaN; stable alternative: ``tf.nn.log_softmax``. Caveat: when the
    loaded signature runs, Grappler's arithmetic optimizer rewrites Log(Softmax) into LogSoftmax, so the
    forward value is finite (-200) while the gradient is still NaN (eager evaluation gives -inf).
    """
    _stateless(lambda x: {"y": tf.math.log(tf.nn.softmax(x, axis=-1))}, [_spec([None, 5])], export_dir)


def softplus(export_dir: str) -> None:
    """``y = tf.math.softplus(x)`` (the stable log(1 + exp(x))). Input ``x`` float32 [None]; output ``y``.

    Expected static verdict: x -> y connected.
    Numeric: finite forward and gradient everywhere (gradient 1 at x = 100); control for
    ``log1pexp_naive``.
    """
    _stateless(lambda x: {"y": tf.math.softplus(x)}, [_spec([None])], export_dir)


# --------------------------------------------------------------------------------------------------
# 28-30: second order, py_function, unsafe side effects
# --------------------------------------------------------------------------------------------------

def second_order_stop_gradient(export_dir: str) -> None:
    """Custom gradient of ``x**3`` whose gradient ``3 * stop_gradient(x)**2 * dy`` is right to first order.

    Input ``x`` float32 [None]; output ``y``.

    Expected static verdict: x -> y connected (first order, custom gradient IdentityN). In the custom
    gradient function (``library.registered_gradients``) x reaches the returned gradient only through
    ``StopGradient``: second-order x -> dy/dx is blocked by StopGradient.
    Numeric: first derivative agrees with finite differences (3x^2); the second derivative is None
    (true value 6x), also after loading.
    """
    @tf.custom_gradient
    def cube(x):
        def grad(dy):
            xs = tf.stop_gradient(x)
            return 3.0 * xs ** 2 * dy

        return x ** 3, grad

    _stateless(lambda x: {"y": cube(x)}, [_spec([None])], export_dir)


def pyfunc_float(export_dir: str) -> None:
    """``y = tf.py_function(lambda v: v * 2, [x], tf.float32)`` (op type ``EagerPyFunc``).

    Input ``x`` float32 [None]; output ``y`` (static shape set with ``set_shape``).

    Expected static verdict: x -> y: blocked/unknown at ``EagerPyFunc``: it has a registered gradient
    in-process (the tape re-runs the Python function), but after loading the Python callback does not
    exist, so there is no usable gradient and the graph cannot be executed.
    Numeric: in a fresh process the loaded model cannot run ("Could not find callback"): report as not
    runnable. Caveat for tests: in the process that built it, the loaded model runs and its gradient is
    even right (2), because the callback is still registered.
    """
    def fn(x):
        y = tf.py_function(lambda v: v * 2, [x], tf.float32)
        y.set_shape(x.shape)
        return {"y": y}

    _stateless(fn, [_spec([None])], export_dir)


def unsafe_write_file(export_dir: str) -> None:
    """A signature with a side effect: writes ``as_string(reduce_sum(x))`` to the file named by the
    string input ``path`` (``WriteFile``), and returns ``y = 2 * x``.

    Inputs ``x`` float32 [None], ``path`` string []; output ``y``.

    Expected static verdict: x -> y connected; ``path`` is a string input (not a source). Finding:
    side-effecting / unsafe op ``WriteFile`` in the signature: gradaudit must NEVER execute this model
    (numeric checks skipped or refused unless explicitly allowed). Tests check that no file appears at
    the path they pass.
    """
    def fn(x, path):
        tf.io.write_file(path, tf.strings.as_string(tf.reduce_sum(x)))
        return {"y": 2.0 * x}

    _stateless(fn, [_spec([None]), _spec([], tf.string, name="path")], export_dir)


# --------------------------------------------------------------------------------------------------
# registry and entry points
# --------------------------------------------------------------------------------------------------

MODELS: dict[str, Callable[[str], None]] = {
    "classifier_argmax": classifier_argmax,
    "numpy_function": numpy_function,
    "quantize_int": quantize_int,
    "log1pexp_naive": log1pexp_naive,
    "log1pexp_custom": log1pexp_custom,
    "ratio_naive": ratio_naive,
    "ratio_stable": ratio_stable,
    "normal_logpdf": normal_logpdf,
    "mlp": mlp,
    "cnn": cnn,
    "while_loop": while_loop,
    "cond": cond,
    "case": case,
    "nested_function": nested_function,
    "embedding": embedding,
    "stop_gradient": stop_gradient,
    "ste": ste,
    "fake_quant": fake_quant,
    "dropout": dropout,
    "wrong_custom_gradient": functools.partial(build_wrong_gradient, rel_error=1e-4),
    "wrong_custom_gradient_2x": functools.partial(build_wrong_gradient, rel_error=1.0),
    "disconnected_variable": disconnected_variable,
    "no_gradient_op": no_gradient_op,
    "not_differentiable_op": not_differentiable_op,
    "unstable_norm": unstable_norm,
    "safe_norm": safe_norm,
    "where_nan": where_nan,
    "where_safe": where_safe,
    "reciprocal_ratio": reciprocal_ratio,
    "log_sigmoid_naive": log_sigmoid_naive,
    "log_softmax_naive": log_softmax_naive,
    "softplus": softplus,
    "second_order_stop_gradient": second_order_stop_gradient,
    "pyfunc_float": pyfunc_float,
    "unsafe_write_file": unsafe_write_file,
}


def build(name: str, out_dir: str) -> str:
    """Write the SavedModel ``name`` at ``out_dir/name`` and return that path."""
    if name not in MODELS:
        raise KeyError(f"unknown sample model {name!r}; known: {', '.join(MODELS)}")
    path = os.path.join(out_dir, name)
    MODELS[name](path)
    return path


def build_all(out_dir: str = HERE) -> list[str]:
    """Build every model in ``MODELS`` into ``out_dir/<name>``; return the paths in ``MODELS`` order."""
    os.makedirs(out_dir, exist_ok=True)
    return [build(name, out_dir) for name in MODELS]


if __name__ == "__main__":
    _out = sys.argv[1] if len(sys.argv) > 1 else HERE
    _t0 = time.perf_counter()
    _paths = build_all(_out)
    print(f"built {len(_paths)} SavedModels in {_out} in {time.perf_counter() - _t0:.1f} s")
