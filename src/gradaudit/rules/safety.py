"""GA4xx: safety. What TensorFlow would run, checked against a reviewed allowlist of pure computation before
anything of the model is executed; the detection is the safety gate's (gradaudit.safety)."""

from __future__ import annotations

from ..model import Severity
from .base import Rule, define

UnsafeOp = define(
    "GA401", "unsafe-op", Severity.ERROR,
    fix="Only run this model if you trust where it came from (--allow-unsafe-ops); remove file, "
        "network, process and Python ops from signatures, initializers and saved gradients.",
    blocks_execution=True,
    doc="""An op that touches files, the network, the process or Python would run when the model is loaded or called.

    ## What it does
    Walks everything TensorFlow runs: the audited signature and every function reachable from it (calls,
    loops, branches, dataset functions, any op's function attributes), saved custom gradients, the model
    initializer, resource creator, initializer and destroyer functions, saveable objects' save and restore
    functions, the saver's restore op, and for TF1 models the main, legacy-init and table-initializer
    collections. Each op's type is looked up in gradaudit's classification of TensorFlow's op registry;
    `io`, `network`, `process` and `python` ops are this finding (`WriteFile`, `ReadFile`, dataset caches,
    snapshots and TFRecord writers, summary writers, `PrintV2` to a file, RPC and collective ops, `PyFunc`).
    Two reads are expected and are not findings: the saver's `RestoreV2` of the file name the loader feeds
    (the model's own `variables/`), and a lookup table reading one of the model's own assets.

    ## Why is this bad?
    A SavedModel is a program: loading or calling it runs these ops with your permissions. When one is
    present gradaudit executes nothing of the model (no load, no numeric checks, no probes) unless you
    pass `--allow-unsafe-ops`.

    ## Example
    ```python
    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32), tf.TensorSpec([], tf.string)])
    def serve(x, path):
        tf.io.write_file(path, tf.strings.as_string(tf.reduce_sum(x)))
        return 2 * x
    ```

    ## Use instead
    Keep I/O outside the model: log and save from the Python code that calls it.
    """,
)


UnprovenOp = define(
    "GA402", "unproven-op", Severity.WARNING,
    fix="If you trust the model, --allow-unsafe-ops runs the numeric checks anyway; if the op is pure "
        "computation, ask for it to be added to gradaudit's reviewed op list.", blocks_execution=True,
    doc="""An op that is not proven harmless would run, so gradaudit ran nothing of the model.

    ## What it does
    Reports ops, reachable from what TensorFlow runs (see `unsafe-op`), whose type is not on gradaudit's
    reviewed allowlist of pure computation: ops that can block forever or share state across sessions
    (queues, barriers, staging areas, mutexes), TPU and XLA host ops, compiled modules (`XlaCallModule`),
    ops of a newer TensorFlow that the list does not classify yet, and op types TensorFlow does not know
    (a custom op whose library is not loaded). The reviewed ops of `--load-ops` packages (tensorflow-text's
    tokenizers, TF-DF's inference and its loader reading the model's own assets) are allowed once their
    package is loaded; before, they are `unknown-op` (GA109), which names the package.

    ## Why is this bad?
    gradaudit only executes a model when it has shown that every op it would run computes on tensors in
    memory. For these ops it cannot show that, so the numeric checks and stability probes did not run and
    the audit rests on the static pass alone. It is a warning, not a proof of harm.

    ## Example
    ```python
    q = tf.queue.FIFOQueue(1, tf.float32)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])
    def serve(x):
        q.enqueue(tf.reduce_sum(x))
        return x * q.dequeue()  # blocks forever if nothing was enqueued
    ```

    ## Use instead
    Export the serving computation without queues, staging areas or custom ops, or pass
    `--allow-unsafe-ops` for a model you trust.
    """,
)


UnsafeAsset = define(
    "GA403", "unsafe-asset", Severity.ERROR,
    fix="Keep every asset a regular file inside the model's assets/ folder; never point an asset at an "
        "absolute path, a `..` path or a symlink that leaves the folder.", blocks_execution=True,
    doc="""A file of the model (an asset, or any file the loader reads) lies outside the model folder or is special.

    ## What it does
    Checks, before anything is opened, every asset the meta graph lists and every entry of the model folder:
    an asset file name that is absolute or holds `..`, a symlink that resolves outside the model folder,
    and a file that is not a regular file (a FIFO, a device such as `/dev/zero`) are this finding. gradaudit
    never opens such a path and executes nothing of the model.

    ## Why is this bad?
    TensorFlow's loader joins asset names to the model folder and hands them to the graph, which reads them:
    an asset named `/home/you/.ssh/id_rsa` or `../../secret` makes loading read a file outside the model,
    and an asset linked to `/dev/zero` makes any copy of the model fill the disk.

    ## Example
    ```text
    model/assets/vocab.txt -> /etc/passwd
    ```

    ## Use instead
    Copy the asset file into `assets/` when you export (tf.saved_model.save does this for `tf.saved_model.Asset`).
    """,
)


RULES: tuple[Rule, ...] = (UnsafeOp, UnprovenOp, UnsafeAsset)
