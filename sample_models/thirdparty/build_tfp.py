"""SavedModels written by TensorFlow Probability (run in its own venv, see README.md)::

    /work/venvs/tfp/bin/python sample_models/thirdparty/build_tfp.py [OUT_DIR]

Writes OUT_DIR/<name>/ (default: this folder) for every model in MODELS, each with truth.json and
inputs.npz computed on the loaded SavedModel (see _truth.py). Fixed initial values, no downloads.
All models are ``tf.Module`` s saved with ``experimental_custom_gradients=True`` and one signature,
``serving_default``, returning a dict.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _truth import table, write_truth

tfd = tfp.distributions
HERE = os.path.dirname(os.path.abspath(__file__))
LIBRARY = {"name": "tensorflow-probability", "version": tfp.__version__}
_SAVE = tf.saved_model.SaveOptions(experimental_custom_gradients=True)


def _save(module, export_dir):
    tf.saved_model.save(module, export_dir,
                        signatures={"serving_default": module.__call__.get_concrete_function()},
                        options=_SAVE)


class MixtureNLL(tf.Module):
    """Healthy: a trainable 3-component Gaussian mixture's log_prob.

    Input ``x`` float32 [None]; trainable ``mix/logits``, ``mix/loc``, ``mix/raw_scale`` (scale =
    softplus(raw_scale)), all [3]. Outputs ``logp`` = log_prob(x) [None] and ``nll`` = -mean(logp).
    Every (source, output) pair is connected; the numeric check must pass for any real x.
    """

    def __init__(self):
        super().__init__()
        self.logits = tf.Variable([0.2, -0.1, 0.4], name="mix/logits")
        self.loc = tf.Variable([-1.0, 0.5, 2.0], name="mix/loc")
        self.raw_scale = tf.Variable([0.3, -0.2, 0.5], name="mix/raw_scale")

    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="x")])
    def __call__(self, x):
        dist = tfd.MixtureSameFamily(
            mixture_distribution=tfd.Categorical(logits=self.logits),
            components_distribution=tfd.Normal(loc=self.loc, scale=tf.nn.softplus(self.raw_scale)))
        logp = dist.log_prob(x)
        return {"logp": logp, "nll": -tf.reduce_mean(logp)}


class GammaLogProb(tf.Module):
    """Healthy, but with a domain: a trainable Gamma's log_prob, defined for x > 0 only.

    Input ``x`` float32 [None] (must be > 0: at x <= 0 TFP returns NaN/-inf without validate_args);
    trainable ``gamma/raw_concentration``, ``gamma/raw_rate`` (scalars, softplus-transformed).
    Outputs ``logp`` [None] and ``nll`` scalar. All pairs connected (lgamma, log, xlogy).
    """

    def __init__(self):
        super().__init__()
        self.raw_concentration = tf.Variable(1.2, name="gamma/raw_concentration")
        self.raw_rate = tf.Variable(0.4, name="gamma/raw_rate")

    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="x")])
    def __call__(self, x):
        dist = tfd.Gamma(concentration=tf.nn.softplus(self.raw_concentration),
                         rate=tf.nn.softplus(self.raw_rate))
        logp = dist.log_prob(x)
        return {"logp": logp, "nll": -tf.reduce_mean(logp)}


class GammaRSample(tf.Module):
    """Reparameterized Gamma sampler with a stateless int32 seed input (implicit reparameterization).

    Inputs ``seed`` int32 [2] (stateless seed; no gradient) and ``x`` float32 [3] (a scale applied to
    the samples). Trainable ``gamma/raw_concentration`` [3] and ``gamma/raw_rate`` [3] (softplus).
    Outputs ``sample`` = x * Gamma(c, r).sample(4, seed) [4, 3] and ``mean_sample`` = mean over the 4
    draws [3].

    TFP wraps its sampler in ``tf.custom_gradient``: the saved ``IdentityN`` has inputs
    (sample, impl, concentration, rate, seed) and its saved gradient function returns
    (None, None, d/dconcentration, d/drate, None) -- fewer tensors than inputs in the FunctionDef.
    Expected: x, both variables -> sample, mean_sample connected (nonzero gradients through the
    custom gradient); the seed is an integer input (not a source).
    """

    def __init__(self):
        super().__init__()
        self.raw_concentration = tf.Variable([1.5, 0.7, 3.0], name="gamma/raw_concentration")
        self.raw_rate = tf.Variable([0.5, 1.0, -0.3], name="gamma/raw_rate")

    @tf.function(input_signature=[tf.TensorSpec([2], tf.int32, name="seed"),
                                  tf.TensorSpec([3], tf.float32, name="x")])
    def __call__(self, seed, x):
        dist = tfd.Gamma(concentration=tf.nn.softplus(self.raw_concentration),
                         rate=tf.nn.softplus(self.raw_rate))
        s = dist.sample(4, seed=seed) * x
        return {"sample": s, "mean_sample": tf.reduce_mean(s, axis=0)}


class BetaRSample(tf.Module):
    """Reparameterized Beta sampler (two Gamma draws inside) with a stateless int32 seed input.

    Inputs ``seed`` int32 [2]; trainable ``beta/raw_c1`` [2], ``beta/raw_c0`` [2] (softplus).
    Outputs ``sample`` [5, 2] and ``loss`` = mean((sample - 0.3)**2) scalar.
    Expected: both variables -> both outputs connected through TFP's saved custom gradient; no float
    signature input.
    """

    def __init__(self):
        super().__init__()
        self.raw_c1 = tf.Variable([0.5, 2.0], name="beta/raw_c1")
        self.raw_c0 = tf.Variable([1.0, 0.2], name="beta/raw_c0")

    @tf.function(input_signature=[tf.TensorSpec([2], tf.int32, name="seed")])
    def __call__(self, seed):
        dist = tfd.Beta(tf.nn.softplus(self.raw_c1), tf.nn.softplus(self.raw_c0))
        s = dist.sample(5, seed=seed)
        return {"sample": s, "loss": tf.reduce_mean(tf.square(s - 0.3))}


def _rng(seed):
    return np.random.default_rng(seed)


# name -> (module class, serving_default inputs {key: (array, domain)})
class BetaincGrad(tf.Module):
    """Healthy: TensorFlow Probability's own ``tfp.math.betainc`` (a custom gradient for a, b and x), trainable
    ``a`` = 2.0 and ``b`` = 1.5, ``x`` float32 [None] through a sigmoid; output ``ib`` [None].

    TFP's saved gradient function holds dozens of division patterns (squared-denominator, GA306): library
    code the user did not write, to be one line per function, not a wall.
    """

    def __init__(self):
        super().__init__()
        self.a = tf.Variable(2.0, name="a")
        self.b = tf.Variable(1.5, name="b")

    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="x")])
    def __call__(self, x):
        return {"ib": tfp.math.betainc(self.a, self.b, tf.sigmoid(x))}


MODELS = {
    "tfp_mixture_nll": (MixtureNLL, lambda: {
        "x": (_rng(1).normal(0.5, 1.5, size=8).astype(np.float32), "real, N(0.5, 1.5)")}),
    "tfp_gamma_logprob": (GammaLogProb, lambda: {
        "x": (_rng(2).gamma(2.0, 1.0, size=8).astype(np.float32), "x > 0 (Gamma(2, 1) draws)")}),
    "tfp_gamma_rsample": (GammaRSample, lambda: {
        "seed": (np.array([7, 11], np.int32), "any int32 pair (stateless seed)"),
        "x": (_rng(3).uniform(0.5, 2.0, size=3).astype(np.float32), "real, U(0.5, 2)")}),
    "tfp_betainc_grad": (BetaincGrad, lambda: {
        "x": (np.array([-1.2, -0.3, 0.4, 1.5], np.float32), "real, N(0, 1)")}),
    "tfp_beta_rsample": (BetaRSample, lambda: {
        "seed": (np.array([3, 5], np.int32), "any int32 pair (stateless seed)")}),
}


def fixed_seed_check(path, inputs, h=1e-3):
    """Directional derivative of sum(out * c) per trainable variable: autodiff vs central differences.

    On the loaded model, float32, the recorded inputs (same seed for every evaluation), direction and
    cotangent from default_rng(1). For the samplers this measures whether TFP's saved gradient is the
    derivative of the forward pass at a fixed seed (it is not for the concentration: implicit
    reparameterization differentiates the CDF, not the rejection sampler's path).
    """
    loaded = tf.saved_model.load(path)
    sig = loaded.signatures["serving_default"]
    feed = {k: tf.constant(v[0]) for k, v in inputs.items()}
    rng = np.random.default_rng(1)
    out = {}
    for key in sorted(k for k, v in sig(**feed).items() if v.dtype.is_floating):
        c = tf.constant(rng.normal(size=sig(**feed)[key].shape).astype(np.float32))
        for var in sig.trainable_variables:
            d = rng.normal(size=var.shape).astype(np.float32)
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(sig(**feed)[key] * c)
            ad = float(tf.reduce_sum(tape.gradient(loss, var) * d))
            v0 = var.numpy()
            var.assign(v0 + h * d)
            lp = float(tf.reduce_sum(sig(**feed)[key] * c))
            var.assign(v0 - h * d)
            lm = float(tf.reduce_sum(sig(**feed)[key] * c))
            var.assign(v0)
            fd = (lp - lm) / (2 * h)
            out[f"{var.name.split(':')[0]} -> {key}"] = {
                "autodiff": ad, "central_difference": fd,
                "relative_error": abs(ad - fd) / max(abs(fd), abs(ad), 1e-30)}
    return {"what": f"float32 directional derivative, step {h}, direction and cotangent from "
                    "default_rng(1), recorded inputs (fixed seed)", "results": out}


def build(name, out_dir=HERE):
    cls, inputs = MODELS[name]
    path = os.path.join(out_dir, name)
    _save(cls(), path)
    ins = inputs()
    doc = write_truth(path, {"serving_default": ins}, LIBRARY, os.path.basename(__file__),
                      notes=cls.__doc__.strip().splitlines()[0],
                      extra={"fixed_seed_check": fixed_seed_check(path, ins)})
    return path, doc


if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else HERE
    for n in (sys.argv[2:] or MODELS):
        p, d = build(n, out)
        print(p, table(d), {k: round(v["relative_error"], 4)
                            for k, v in d["fixed_seed_check"]["results"].items()})
