"""GA3xx: numerical hazards. Static lints for well-known unstable patterns, and the rules the
stability probes and the second-order check report when they run the model."""

from __future__ import annotations

from ..model import Severity
from .base import Rule, define

Log1pExp = define(
    "GA301", "log1p-exp", Severity.WARNING,
    fix="y = tf.math.softplus(x)   # instead of tf.math.log(1 + tf.exp(x))",
    doc="""`log(1 + exp(x))` written out: exp overflows long before the result does.

    ## What it does
    Finds `Log(1 + Exp(x))` and `Log1p(Exp(x))` on a gradient path.

    ## Why is this bad?
    In float32 `exp(x)` is inf from x ≈ 88.7, so the value is inf where the true result is
    about x, and the gradient `exp(x) / (1 + exp(x))` is inf / inf = NaN (at x = 100 in float32).

    ## Example
    ```python
    y = tf.math.log(1.0 + tf.exp(x))
    ```

    ## Use instead
    ```python
    y = tf.math.softplus(x)
    ```
    """,
)


LogSigmoid = define(
    "GA302", "log-sigmoid", Severity.WARNING,
    fix="y = tf.math.log_sigmoid(x)   # instead of tf.math.log(tf.sigmoid(x))",
    doc="""`log(sigmoid(x))` written out: sigmoid underflows to 0 for very negative x.

    ## What it does
    Finds `Log(Sigmoid(x))` on a gradient path, and the sigmoid written by hand,
    `log(1 / (1 + exp(-x)))` (there `exp(-x)` overflows instead).

    ## Why is this bad?
    For x below about -87 (float32; TensorFlow's kernels flush subnormals to zero) sigmoid(x)
    is 0: the value is -inf where the true result is about x, and the gradient is NaN instead
    of about 1.

    ## Example
    ```python
    log_p = tf.math.log(tf.sigmoid(logits))
    ```

    ## Use instead
    ```python
    log_p = tf.math.log_sigmoid(logits)
    ```
    """,
)


LogSoftmax = define(
    "GA303", "log-softmax", Severity.WARNING,
    fix="y = tf.nn.log_softmax(x, axis=-1)   # instead of tf.math.log(tf.nn.softmax(x))",
    doc="""`log(softmax(x))` written out: softmax underflows to 0 when the logits are spread.

    ## What it does
    Finds `Log(Softmax(x))` on a gradient path.

    ## Why is this bad?
    When logits differ by more than about 87 (float32), some softmax entries are exactly 0:
    log gives -inf and the gradient is NaN. TensorFlow's graph optimizer may rewrite the
    forward into LogSoftmax when the model runs, so the value can look finite while the
    gradient is still NaN.

    ## Example
    ```python
    log_probs = tf.math.log(tf.nn.softmax(logits))
    ```

    ## Use instead
    ```python
    log_probs = tf.nn.log_softmax(logits)
    ```
    """,
)


SqrtAtZero = define(
    "GA304", "sqrt-at-zero", Severity.WARNING,
    fix="y = tf.sqrt(tf.reduce_sum(x * x, axis=-1) + 1e-12)   # or a double-where safe norm",
    doc="""The square root of a value that is zero at ordinary inputs (a sum of squares, a norm).

    ## What it does
    Finds `Sqrt` and `Pow(x, p)` with 0 < p < 1 whose argument is a square, a sum of squares,
    an absolute value or a ReLU, with no positive constant added.

    ## Why is this bad?
    The derivative of sqrt at 0 is infinite: `tf.norm` of a zero vector (a padded row, a
    distance between equal points) has a NaN gradient although its value, 0, is finite.

    ## Example
    ```python
    dist = tf.norm(a - b, axis=-1)
    ```

    ## Use instead
    ```python
    dist = tf.sqrt(tf.reduce_sum(tf.square(a - b), axis=-1) + 1e-12)
    ```
    """,
)


WhereNan = define(
    "GA305", "where-nan", Severity.WARNING,
    fix="safe = tf.where(x > 0, x, 1.0); y = tf.where(x > 0, tf.math.log(safe), 0.0)   # double where",
    doc="""`tf.where(cond, f(x), y)` whose f (log, division, fractional pow) is non-finite where cond is false.

    ## What it does
    Finds a select (`tf.where`) whose branch computes an op that is non-finite at some inputs
    (log, log1p, division, pow) of a value the condition itself tests. Sqrt, rsqrt and reciprocal
    are not reported: TensorFlow's gradients of those return 0 for a zero incoming gradient, so
    `tf.where(x > 0, tf.sqrt(x), 0.)` has a finite gradient at 0 (TF 2.21).

    ## Why is this bad?
    Both branches are computed. Where the condition is false the unselected branch's value
    is dropped, but its gradient is not: 0 * inf = NaN flows back to x. `tf.where(x > 0,
    tf.math.log(x), 0.)` has a NaN gradient at x = 0 although its value is 0.

    ## Example
    ```python
    y = tf.where(x > 0, tf.math.log(x), 0.0)
    ```

    ## Use instead
    ```python
    safe = tf.where(x > 0, x, 1.0)          # make the input safe first
    y = tf.where(x > 0, tf.math.log(safe), 0.0)
    ```
    """,
)


SquaredDenominator = define(
    "GA306", "squared-denominator", Severity.WARNING,
    fix="db = (a / b) / b * dy   # instead of a / b**2 * dy; and a / b instead of a * tf.math.reciprocal(b)",
    doc="""A division by a square, or a product with a reciprocal, whose gradient squares a tiny or huge value.

    ## What it does
    Finds `x / b**2` (also `x / (b * b)`, `x / tf.square(b)`, `x / tf.reduce_sum(b * b)`), forward or in a saved
    custom-gradient function, and `x * tf.math.reciprocal(b)`, where b varies with a source.

    ## Why is this bad?
    b**2 underflows to 0 when |b| < 1e-19 and overflows when |b| > 1e19 in float32, even
    when x / b**2 is representable: a hand-written gradient `a / b**2` is inf at
    a = b = 1e-20, where the true value is 1e20. The gradient of `reciprocal(b)` is
    -1/b**2 and fails the same way.

    ## Example
    ```python
    def grad(dy):
        return -dy / b, a / b ** 2 * dy
    ```

    ## Use instead
    ```python
    def grad(dy):
        return -dy / b, (a / b) / b * dy
    ```
    """,
)


UnstableGradient = define(
    "GA310", "unstable-gradient", Severity.ERROR, probes=True,
    fix="Rewrite the op the probe names in a stable form (see the GA30x hazard reported on it, if "
        "any), or keep its input away from the bad region (an epsilon, a clip, a double where).",
    doc="""The forward value is finite but the gradient has NaN or Inf at some input scale.

    ## What it does
    Runs the model at the synthesised inputs, each normalised to a largest magnitude of 1, scaled
    by 0, 1e-30, ... 1e4 (both signs; all float inputs together and each alone) and computes the
    gradient of every output with a non-persistent tape. When the forward is finite and a
    gradient is NaN or Inf while its true value is representable, it reports the scales, the
    source and output, and the op whose backward produced the first non-finite value, with the
    forward values it received.

    ## Why is this bad?
    This is "loss became NaN" after days of training: one batch reaches the bad region,
    the NaN gradient reaches the optimizer, and every weight becomes NaN.

    ## Example
    ```python
    y = tf.norm(x, axis=-1)                     # NaN gradient at a zero row
    f = a * tf.math.reciprocal(b)               # -inf gradient at a = b = 1e-20
    ```

    ## Use instead
    ```python
    y = tf.sqrt(tf.reduce_sum(x * x, -1) + 1e-12)
    f = a / b
    ```
    """,
)


NonfiniteForward = define(
    "GA311", "nonfinite-forward", Severity.WARNING, probes=True,
    fix="Use the stable form of the op the probe names (softplus, log_sigmoid, log_softmax, "
        "logsumexp), or bound its input.",
    doc="""The forward value overflows to Inf or becomes NaN within the probe ladder.

    ## What it does
    Reports the scales of the probe ladder at which an output is Inf or NaN, and the op that
    first produced a non-finite value from finite inputs ("Exp received 100 and returned inf").
    Where the float64 copy of the model gives a finite value there that fits in the model's own
    dtype (the true result is ordinary; an intermediate of the written form overflows), the
    gradient is NaN or Inf there too and no static lint already reports the form, it is an error,
    that value its evidence; a value that itself lies beyond the dtype's range (exp(100) in
    float32), or whose gradient stays finite (a custom gradient written for it), stays a warning.

    ## Why is this bad?
    A loss that is inf at inputs of size 100 makes training fail on the first such batch;
    usually an intermediate overflows although the true result is moderate.

    ## Example
    ```python
    y = tf.math.log(1.0 + tf.exp(x))            # inf for x > 88.7
    ```

    ## Use instead
    ```python
    y = tf.math.softplus(x)
    ```
    """,
)


SecondOrderMismatch = define(
    "GA320", "second-order-mismatch", Severity.ERROR, probes=True,
    fix="Differentiate the gradient function itself: avoid tf.stop_gradient and numpy inside a "
        "custom gradient, or give it its own custom gradient (see tf.custom_gradient's nesting notes).",
    doc="""Hessian-vector products disagree with central differences of the gradient (`--order 2`).

    ## What it does
    Computes H·v by differentiating the gradient again (reverse over reverse, non-persistent
    tapes) and compares it with (∇f(x + h v) - ∇f(x - h v)) / 2h at two step sizes; reports
    a mismatch only when the two finite-difference estimates agree with each other.

    ## Why is this bad?
    Second-order methods, gradient penalties (WGAN-GP), meta-learning and physics-informed
    losses train on these values. A custom gradient computed through `tf.stop_gradient` or
    numpy is right to first order and has a zero second derivative where the truth is not zero.
    So is a `tf.stop_gradient` in the forward where the result does not move with the stopped
    value to first order: `tf.nn.moments` takes the variance around `stop_gradient(mean)`, and
    Keras' `LayerNormalization` uses it. Without a custom gradient, the finding names that
    stop_gradient when the float64 copy with every stop_gradient made an identity gives the
    second derivative the central differences measure (its value is in the message), and its
    fix says to compute that part without it.

    ## Example
    ```python
    @tf.custom_gradient
    def cube(x):
        return x ** 3, lambda dy: 3.0 * tf.stop_gradient(x) ** 2 * dy
    ```

    ## Use instead
    ```python
    @tf.custom_gradient
    def cube(x):
        return x ** 3, lambda dy: 3.0 * x ** 2 * dy
    ```
    """,
)


SecondOrderUnavailable = define(
    "GA321", "second-order-unavailable", Severity.WARNING, probes=True,
    fix="Read TensorFlow's reason in the message: a custom gradient that cannot be differentiated again "
        "needs its own tf.custom_gradient; a loaded While loop or other construct TensorFlow cannot "
        "differentiate twice after loading is better checked on the Python function before export.",
    doc="""TensorFlow cannot build the second-order gradient of the loaded model (`--order 2`).

    ## What it does
    Reports TensorFlow's own error when differentiating the gradient of the loaded model
    raises, for example "... is out of scope and cannot be used here" from some loaded
    custom gradients.

    ## Why is this bad?
    Anything that needs second derivatives (gradient penalties, Hessian-vector products,
    meta-learning) fails on this model.

    ## Example
    A saved custom gradient whose gradient function captures tensors TensorFlow cannot
    re-bind when it differentiates the function again.

    ## Use instead
    Give the gradient function its own `tf.custom_gradient`, or write the forward with
    differentiable ops and no custom gradient.
    """,
)


GradientUnderflow = define(
    "GA330", "gradient-underflow", Severity.WARNING, probes=True,
    fix="Train with a loss scale: keras.mixed_precision.LossScaleOptimizer(optimizer) (Keras wraps the "
        "optimizer in one when the dtype policy is mixed_float16), or multiply the loss by the scale named "
        "and divide the gradients by it.",
    doc="""Gradients that flush to zero in the `--precision` dtype without a loss scale.

    ## What it does
    Casts each source's gradient (at the synthesised or `--inputs` point, for a random
    cotangent of unit scale on the outputs) to float16 or bfloat16 and reports the sources
    of which at least 1% of the nonzero entries become zero: below about half of the dtype's
    smallest subnormal (2**-25 ≈ 3e-8 in float16). It names the loss scale a dynamic loss
    scaler settles on and says that it brings those entries back into range.

    ## Why is this bad?
    A gradient entry that is zero never moves its weight: training in float16 without loss
    scaling silently freezes those weights, while the same model trains in float32.

    ## Example
    ```python
    keras.mixed_precision.set_global_policy("mixed_float16")
    with tf.GradientTape() as tape:   # a custom training loop without loss scaling
        loss = 1e-4 * tf.reduce_mean(model(x) ** 2)
    grads = tape.gradient(loss, model.trainable_variables)   # float16 backward: zeros
    ```

    ## Use instead
    ```python
    opt = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.Adam())
    with tf.GradientTape() as tape:
        loss = 1e-4 * tf.reduce_mean(model(x) ** 2)
        scaled = opt.scale_loss(loss)
    grads = tape.gradient(scaled, model.trainable_variables)
    opt.apply(grads, model.trainable_variables)   # unscales, skips non-finite steps
    ```
    """,
)


GradientRange = define(
    "GA331", "gradient-range", Severity.ERROR, probes=True,
    fix="Keep the layers whose gradients are tiny (or huge) in float32 (dtype='float32' on those layers under "
        "the mixed_float16 policy), train in bfloat16 (float32's exponent range), or rescale the model so "
        "its gradients are of similar size (normalise inputs and activations).",
    doc="""No single loss scale brings every gradient into the `--precision` dtype's range.

    ## What it does
    Takes the loss scale a dynamic loss scaler settles on (the largest power of two for
    which no scaled gradient overflows) and reports the sources of which at least 1% of the
    nonzero gradient entries are still zero after the cast at that scale: the gradients
    span a dynamic range wider than the dtype's (about 1.1e12 in float16).

    ## Why is this bad?
    The loss scaler cannot raise the scale without overflowing the largest gradients (a
    skipped step each time), so the smallest stay zero: those weights never train.

    ## Example
    ```python
    y = dense_big(x) + 1e-9 * dense_small(x)   # gradients 1 and 1e-13 in one loss
    ```

    ## Use instead
    ```python
    small = keras.layers.Dense(4, dtype="float32")   # a float32 island
    y = dense_big(x) + tf.cast(1e-9 * small(x), y_dtype)
    ```
    """,
)


GradientOverflow = define(
    "GA332", "gradient-overflow", Severity.WARNING, probes=True,
    fix="Scale the loss down (a mean instead of a sum over many terms), normalise the inputs, or keep the "
        "layer in float32 (dtype='float32' under the mixed_float16 policy).",
    doc="""Gradients that overflow in the `--precision` dtype even at loss scale 1.

    ## What it does
    Reports the sources with gradient entries above the dtype's largest finite value
    (65504 in float16) at the synthesised or `--inputs` point, and the loss scale below 1
    a dynamic loss scaler would have to fall to.

    ## Why is this bad?
    Every step overflows until the scaler has halved its scale below 1, which pushes the
    small gradients further towards zero; without a scaler the gradient is inf.

    ## Example
    ```python
    loss = tf.reduce_sum(model(x) ** 2)   # a sum over a large batch and many outputs
    ```

    ## Use instead
    ```python
    loss = tf.reduce_mean(model(x) ** 2)
    ```
    """,
)


ActivationOverflow = define(
    "GA333", "activation-overflow", Severity.ERROR, probes=True,
    fix="Compute the op in float32: a layer with dtype='float32' under the mixed_float16 policy (a float32 "
        "island), or a stable form (tf.nn.softmax, tf.math.reduce_logsumexp, tf.math.softplus instead of exp; "
        "a mean instead of a sum), or a smaller input scale.",
    doc="""An op's output overflows in the `--precision` dtype at the model's own activations.

    ## What it does
    Runs the model's graph (variables frozen, calls inlined) at the synthesised or `--inputs`
    point and over the stability probe ladder, and names each op whose float inputs fit the
    dtype while its output does not (float16: `exp` beyond about 11, squares beyond about
    256, sums of many large terms). An error at the model's own point; info when it happens
    only at a probe scale (the ladder goes far beyond the activations float16 models train at).

    ## Why is this bad?
    In float16 the op returns inf: the loss is inf or NaN and a loss scaler skips every step,
    while the same model trains in float32.

    ## Example
    ```python
    keras.mixed_precision.set_global_policy("mixed_float16")
    y = tf.exp(keras.layers.Dense(4)(x))   # exp(12) = 162754 > 65504
    ```

    ## Use instead
    ```python
    y = keras.layers.Activation("exponential", dtype="float32")(keras.layers.Dense(4)(x))
    ```
    """,
)


ActivationUnderflow = define(
    "GA334", "activation-underflow", Severity.WARNING, probes=True,
    fix="Compute the op and its consumer in float32 (a layer with dtype='float32' under the mixed_float16 "
        "policy), add an epsilon the dtype can represent (1e-4 in float16, not 1e-8), or use a stable form "
        "(tf.math.log_sigmoid, tf.nn.log_softmax).",
    doc="""An op's output underflows to zero in the `--precision` dtype and feeds a log, a division or a root.

    ## What it does
    At the model's own activations and over the probe ladder, names the ops whose nonzero
    outputs become zero after the cast (at least 1% of them) where the value feeds `Log`,
    `Reciprocal`, `Rsqrt`, `Sqrt`, `Pow` or the denominator of a division. A warning at the
    model's own point, info when only at a probe scale.

    ## Why is this bad?
    A zero that is harmless by itself becomes -inf, inf or NaN one op later: the loss or the
    gradient is not finite in float16 while it is in float32.

    ## Example
    ```python
    y = tf.math.log(tf.sigmoid(x) + 1e-8)   # 1e-8 is 0 in float16
    ```

    ## Use instead
    ```python
    y = tf.math.log_sigmoid(x)
    ```
    """,
)


RULES: tuple[Rule, ...] = (
    Log1pExp, LogSigmoid, LogSoftmax, SqrtAtZero, WhereNan, SquaredDenominator,
    UnstableGradient, NonfiniteForward, SecondOrderMismatch, SecondOrderUnavailable,
    GradientUnderflow, GradientRange, GradientOverflow, ActivationOverflow, ActivationUnderflow,
)


# -- detection ------------------------------------------------------------------------------
