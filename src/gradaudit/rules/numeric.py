"""GA2xx: rules whose findings come from running the model (numeric gradient checks)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..model import OpRef, Severity
from .base import Rule, define

GradientMismatch = define(
    "GA201", "gradient-mismatch", Severity.ERROR, probes=True,
    fix="Fix the gradient function (tf.custom_gradient / tf.RegisterGradient) named in the message; "
        "check it against the derivative of the forward pass it replaces.",
    doc="""The gradient TensorFlow computes is not the derivative of the forward pass.

    ## What it does
    Projects the outputs on a random signed cotangent u and compares the directional derivative
    TensorFlow's gradient gives along a random signed direction v with central finite
    differences of u·f along v. The step is chosen from the dtype and confirmed by a step sweep
    that measures rounding noise and truncation error (Richardson extrapolation); the model is
    evaluated in float64 when its graph can be upcast. A discrepancy is reported only when it
    exceeds that error bound at the sampled point *and* at a nearby one (a ReLU or max-pool kink
    at one point looks like a wrong gradient). Failing variable groups are bisected down to the
    variable at fault.

    ## Why is this bad?
    Training follows the wrong direction, silently: the loss may still go down for a while.
    Hand-written gradients (`tf.custom_gradient`, `tf.RegisterGradient`) are the usual cause;
    `tf.test.compute_gradient` in float32 cannot see a relative error of 1e-4, because its own
    error grows as its step shrinks.

    ## Example
    ```python
    @tf.custom_gradient
    def log1pexp(x):
        e = tf.exp(x)
        return tf.math.log(1 + e), lambda dy: dy * e / (1 + e) ** 2   # wrong: that is the 2nd derivative
    ```

    ## Use instead
    ```python
    @tf.custom_gradient
    def log1pexp(x):
        e = tf.exp(x)
        return tf.math.log(1 + e), lambda dy: dy * (1 - 1 / (1 + e))
    ```
    """,
)


Nondeterministic = define(
    "GA202", "nondeterministic", Severity.WARNING,
    fix="Export the model for inference without active randomness (dropout with training=False, no "
        "random noise layers), or use stateless random ops with a fixed seed.",
    doc="""Two evaluations of the model at the same point give different outputs.

    ## What it does
    Evaluates the outputs twice at the same inputs and variables; when they differ by more than
    rounding, the outputs concerned are left out of the gradient checks, which are never reported
    as mismatches. Stateful random ops found in the signature's functions are named.

    ## Why is this bad?
    A gradient cannot be checked against a function that changes between calls, and a served
    model that is random (dropout left on, noise layers) is rarely intended.

    ## Example
    ```python
    @tf.function(input_signature=[tf.TensorSpec([None, 8])])
    def __call__(self, x):
        return tf.nn.dropout(self.dense(x), rate=0.5)   # active at serving time
    ```

    ## Use instead
    ```python
    def __call__(self, x, training=False):
        h = self.dense(x)
        return tf.nn.dropout(h, rate=0.5) if training else h
    ```
    """,
)


SurrogateGradient = define(
    "GA203", "surrogate-gradient", Severity.INFO,
    fix="Nothing to do if the surrogate is intended (straight-through estimator, fake quantisation).",
    doc="""The forward pass is piecewise constant along a direction while its gradient is not zero.

    ## What it does
    Reports checks where the finite-difference derivative is zero (the outputs do not move,
    beyond rounding, for small steps) or the forward jumps, while TensorFlow's gradient is
    clearly non-zero. This is how straight-through estimators and fake quantisation are built;
    such checks are not reported as `gradient-mismatch`. Where the model writes no quantiser and
    no `tf.stop_gradient` and the surrogate is TensorFlow's own registered gradient (a
    `CropAndResize` with `method='nearest'` hands its boxes the bilinear crop's gradient), the
    finding is a warning naming that op.

    ## Why is this bad?
    It is usually not: the gradient is a deliberate surrogate of a function whose true
    derivative is zero almost everywhere. It is listed so that a reader can confirm each one
    is intended.

    ## Example
    ```python
    q = x + tf.stop_gradient(tf.round(x) - x)          # straight-through rounding
    q = tf.quantization.fake_quant_with_min_max_args(x, -6.0, 6.0)
    ```

    ## Use instead
    Keep it if intended. If a true derivative is wanted, use a smooth function instead of
    the quantiser.
    """,
)


MissingGradient = define(
    "GA204", "missing-gradient", Severity.ERROR,
    fix="Find the op TensorFlow cannot differentiate on this path (run the static rules with the same "
        "signature) and replace it, or give it a gradient.",
    doc="""TensorFlow returns no gradient although the outputs depend on the source.

    ## What it does
    Reports sources for which the static pass found a gradient path to an output, but
    `tape.gradient` returns `None` (or raises) when the loaded model is differentiated, while
    finite differences show that the outputs do change with the source. Where the static pass
    already found the op that makes TensorFlow raise (GA101, GA110), that finding records the
    run's error (`confirmed_by`) instead: one cause, one finding.

    ## Why is this bad?
    Keras warns "Gradients do not exist for variables ..." and training leaves those
    variables untouched; custom training loops crash on the `None`.

    ## Example
    A custom op or function-call whose gradient TensorFlow cannot build after loading, or an
    `EagerPyFunc` whose gradient existed only in the exporting process. Or a registered gradient
    that raises at the values it is given: `tf.linalg.det`'s inverts the matrix, so at a
    singular one ("Input is not invertible") no source gets a gradient; the finding names the op
    and the fix is about those values.

    ## Use instead
    Differentiable TensorFlow ops on the path, or a custom gradient saved with the model
    (`tf.saved_model.SaveOptions(experimental_custom_gradients=True)`); inputs away from the
    values where an op's gradient raises, or a gradient defined there.
    """,
)


UnrunnableModel = define(
    "GA205", "unrunnable-model", Severity.WARNING,
    fix="Make the model runnable after tf.saved_model.load (no tf.py_function / tf.numpy_function, "
        "custom op libraries loaded), or pass --static-only.",
    doc="""The loaded model cannot be evaluated, so its gradients could not be checked numerically.

    ## What it does
    Reports TensorFlow's error when the model, loaded with `tf.saved_model.load`, fails to run
    on synthesised (or `--inputs`) data. The numeric checks then have status `error`.

    ## Why is this bad?
    Whatever the static pass says, a model that cannot run cannot be trained or fine-tuned
    from this SavedModel. A `PyFunc` body, for instance, is not saved: "Could not find
    callback with key=pyfunc_0".

    ## Example
    ```python
    y = tf.numpy_function(np.sinh, [x], tf.float32)
    ```

    ## Use instead
    ```python
    y = tf.math.sinh(x)
    ```
    If the inputs must lie in a range (token ids, images), pass real examples with `--inputs`.
    """,
)


Float32Gradient = define(
    "GA206", "float32-gradient", Severity.ERROR,
    fix="Compute the part of the model that meets such values in float64 (tf.cast around it), or keep its values "
        "in float32's range: normalise or scale the inputs down, or use a form of the function that stays in "
        "range; where one op's float32 kernel is at fault, compute that op alone in float64.",
    doc="""The gradient a float32 model computes is far from the exact one, which its float64 copy computes.

    ## What it does
    At the synthesised point and at the probe points the gradient is checked at, compares the model's
    own float32 gradient with its float64 copy's (the same function, the same cotangent). A gap above
    1% and far above float32's own noise at that point (how far the float32 gradient moves at a point
    moved by a few rounding units) is checked with float64 finite differences along the direction
    where the two gradients differ: when those agree with the float64 gradient, the float32 one is
    wrong. The differences, both gradients along that direction and the gap are in the finding and in
    the numeric row (`dtype` float32, `evidence`). When the differences cannot tell which gradient is
    right, the verdict is `incomplete`.

    ## Why is this bad?
    The model trains with the float32 gradient. The float64 checks pass, because in exact arithmetic
    the gradient is right, while every step of training in float32 follows a wrong direction (here a
    sign can flip): TensorFlow's float32 arithmetic lost it (a backward through values near float32's
    range, in its subnormals), or one of its float32 kernels is inaccurate at these values.

    ## Example
    ```python
    y = tf.math.digamma(x)               # its gradient, TensorFlow's float32 Polygamma kernel,
                                         # is wrong for x < -7.5 (float64 is right)
    h = keras.layers.Rescaling(1e17)(x)  # a LayerNormalization after a huge scale:
    h = keras.layers.LayerNormalization()(h)  # its float32 backward underflows
    ```

    ## Use instead
    ```python
    y = tf.cast(tf.math.digamma(tf.cast(x, tf.float64)), tf.float32)
    h = keras.layers.LayerNormalization()(x)  # normalise before scaling, or scale less
    ```
    """,
)


RULES: tuple[Rule, ...] = (GradientMismatch, Nondeterministic, SurrogateGradient, MissingGradient,
                           UnrunnableModel, Float32Gradient)

# Compiled modules from another framework (JAX's exporter): TensorFlow runs them as one op, and their gradient
# is a second compiled module saved beside them, which nothing here can look inside.
COMPILED = frozenset({"XlaCallModule"})


@dataclass(frozen=True)
class MismatchAdvice:
    """What a gradient-mismatch says about where to look: appended to its message, its fix (None: the rule's
    own, which names the custom gradient to fix), and the op it names (None when there is no single one)."""

    hint: str
    fix: str | None
    op: OpRef | None


def _ops_text(ops: Sequence[OpRef], limit: int) -> str:
    shown = ", ".join(f"{op.op_type} '{op.op_name}' in {op.function}" for op in ops[:limit])
    return shown + (", ..." if len(ops) > limit else "")


def mismatch_advice(custom_gradients: Sequence[OpRef], assuming: Sequence[OpRef], zero: bool,
                    given: bool = False) -> MismatchAdvice:
    """Where a wrong gradient comes from, from what the model holds: a compiled module (its saved gradient
    disagrees with its forward; jax2tf wraps each module in a custom gradient of its own, so the custom
    gradients found are not the thing to fix), else the model's custom gradients, else the ops whose registered
    gradient assumes something of its inputs. `zero`: TensorFlow's gradient was exactly zero where the forward
    moves. `given`: the checked point came from --inputs (no advice to give it)."""
    compiled = [op for op in assuming if op.op_type in COMPILED]
    if compiled:
        ignored = (" TensorFlow's gradient is exactly zero there while the forward changes: the saved gradient "
                   "ignores this source." if zero else "")
        hint = (f" The gradient goes through a compiled module gradaudit cannot look inside "
                f"({_ops_text(compiled, 3)}): its saved gradient, a second compiled module, disagrees with the "
                f"derivative of its forward.{ignored} A lax.stop_gradient, a jax.custom_vjp / custom_jvp or a "
                "non-differentiable op inside the exported function does that.")
        if custom_gradients:
            hint += (f" Custom gradients in the model (jax2tf wraps each module in one): "
                     f"{_ops_text(custom_gradients, 3)}.")
        fix = ("Nothing in the TensorFlow graph can be fixed: the saved module's gradient disagrees with its forward. "
               "Look in the exported function (the JAX function given to jax2tf) for lax.stop_gradient, "
               "jax.custom_vjp / custom_jvp or a non-differentiable op on this path and export again; a parameter "
               "frozen on purpose there is an expected difference.")
        return MismatchAdvice(hint, fix, compiled[0] if len(compiled) == 1 else None)
    if custom_gradients:
        return MismatchAdvice(f" The model's custom gradients: {_ops_text(custom_gradients, 3)}.", None,
                              custom_gradients[0] if len(custom_gradients) == 1 else None)
    hint = (" The model has no saved custom gradient: the gradient is TensorFlow's registered one. "
            + (f"Ops whose registered gradient assumes something of its inputs or is not their derivative: "
               f"{_ops_text(assuming, 4)}." if assuming else
               "No op with a registered gradient known to differ from its derivative was found: look at gradients "
               "registered by imported libraries (tf.RegisterGradient) and at the inputs."))
    look = ("look at the ops named in the message and at what their registered gradients assume of the inputs"
            if assuming else "look at what the ops' registered gradients assume of the inputs (indices that repeat, "
            "labels or lengths outside their range) and at gradients registered by imported libraries")
    fix = (f"The model has no custom gradient: {look}" + ("; the inputs given with --inputs may not be what they "
                                                         "assume." if given else "; pass real examples with --inputs."))
    return MismatchAdvice(hint, fix, assuming[0] if len(assuming) == 1 else None)


# Where a gradient-mismatch message's measurement ends and the advice on where to look begins: a difference
# seen at two points, or at one where no kink explains it (a nearby point agrees, no op on the path has a kink
# and the differences along the line do not change slope).
SEEN_TWICE = "seen at two points."
SEEN_ONCE = ("seen at one point, not at a nearby one; no op on the path has a kink and the differences along "
             "the line do not change slope there.")
