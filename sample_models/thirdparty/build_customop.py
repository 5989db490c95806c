"""SavedModels built with a real custom-op package, gradaudit_testops (tests/ops_pkg/), compiled here.

Run with the system python3 (TensorFlow 2.21) and a C++ compiler::

    python3 sample_models/thirdparty/build_customop.py [OUT_DIR]    # default: sample_models/thirdparty

It compiles tests/ops_pkg/gradaudit_testops/ops.cc into a temporary folder (or uses $GRADAUDIT_TESTOPS_SO),
imports gradaudit_testops, writes OUT_DIR/customop_{float,nograd,string,custom_gradient}/ and their truth.json.
These models
load only once the library is loaded (``tf.saved_model.load`` fails with "Op type not registered 'GaScale'"
in a plain TensorFlow).

truth.json holds two truths per model: ``entry_points`` with the package imported (ops and GaScale's Python
gradient known: ``--load-ops gradaudit_testops``), and ``entry_points_so_only`` computed in a fresh process
that only ran ``tf.load_op_library`` on the .so (ops known, no gradient registered for any of them:
``--load-ops path/to/_gradaudit_testops.so``).
"""

from __future__ import annotations

import json
import os
import runpy
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
OPS_PKG = os.path.join(REPO, "tests", "ops_pkg")
sys.path.insert(0, HERE)


def _inputs() -> dict[str, dict[str, dict[str, np.ndarray]]]:
    """Fixed inputs of each model's ``serving_default``."""
    x = np.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]], np.float32)
    return {
        "customop_float": {"serving_default": {"x": x}},
        "customop_nograd": {"serving_default": {"x": x}},
        "customop_custom_gradient": {"serving_default": {"x": x}},
        "customop_string": {"serving_default": {
            "text": np.array([b"hello", b"gradient audit", b""]),  # bytes dtype: savez without pickle
            "x": np.array([0.5, -1.0, 2.0], np.float32)}},
    }


def build_models(out_dir: str) -> list[str]:
    import gradaudit_testops as ga
    import tensorflow as tf

    opts = tf.saved_model.SaveOptions(experimental_custom_gradients=True)

    def save(call, input_signature, name, **attrs):
        cls = type("CustomOpFixture", (tf.Module,), {
            "__call__": tf.function(call, input_signature=input_signature, autograph=False)})
        m = cls()
        for k, v in attrs.items():
            setattr(m, k, v)
        path = os.path.join(out_dir, name)
        tf.saved_model.save(m, path, signatures={"serving_default": m.__call__.get_concrete_function()},
                            options=opts)
        return path

    x_spec = tf.TensorSpec([None, 3], tf.float32, name="x")
    paths = [
        # GaScale (gradient registered in Python by the package) on the float path x, w -> y
        save(lambda self, x: {"y": ga.ga_scale(x * self.w) + self.b, "z": x + self.b},
             [x_spec], "customop_float",
             w=tf.Variable([1.0, -0.5, 0.75], name="w"), b=tf.Variable([0.1, 0.2, 0.3], name="b")),
        # GaNoGrad (no gradient anywhere) between w_in and w_out
        save(lambda self, x: {"y": ga.ga_no_grad(x * self.w_in) * self.w_out},
             [x_spec], "customop_nograd",
             w_in=tf.Variable([1.0, -0.5, 0.75], name="w_in"),
             w_out=tf.Variable([1.0, 0.5, 2.0], name="w_out")),
        # GaStrLen only on the string -> int path; the float path x, w -> y has only built-in ops
        save(lambda self, text, x: {
                "y": x * self.w + tf.cast(ga.ga_str_len(text), tf.float32),
                "length": ga.ga_str_len(text)},
             [tf.TensorSpec([None], tf.string, name="text"), tf.TensorSpec([None], tf.float32, name="x")],
             "customop_string", w=tf.Variable(1.5, name="w")),
    ]

    # GaNoGrad wrapped in a saved tf.custom_gradient whose gradient uses built-in ops only: differentiable
    # with or without the package's Python side (the custom gradient replaces the registry lookup)
    @tf.custom_gradient
    def square1(v):
        return ga.ga_no_grad(v), lambda dy: dy * 2.0 * v

    paths.append(save(lambda self, x: {"y": square1(x * self.w) + self.b}, [x_spec], "customop_custom_gradient",
                      w=tf.Variable([1.0, -0.5, 0.75], name="w"), b=tf.Variable([0.1, 0.2, 0.3], name="b")))
    return paths


def truths(paths: list[str]) -> dict[str, dict]:
    """Truth of each model in this process (whatever of gradaudit_testops it has loaded)."""
    import truth

    ins = _inputs()
    return {os.path.basename(p): truth.signature_truth(p, ins[os.path.basename(p)]) for p in paths}


def main(out_dir: str) -> None:
    import tensorflow as tf
    import truth

    so = os.environ.get("GRADAUDIT_TESTOPS_SO")
    if not so:
        compile_ops = runpy.run_path(os.path.join(OPS_PKG, "gradaudit_testops", "build.py"))["compile_ops"]
        so = compile_ops(tempfile.mkdtemp(prefix="gradaudit_testops_"))
        os.environ["GRADAUDIT_TESTOPS_SO"] = so
    sys.path.insert(0, OPS_PKG)
    paths = build_models(out_dir)
    with_package = truths(paths)
    # the same models in a fresh process that loads only the .so: no Python gradient for GaScale
    proc = subprocess.run([sys.executable, __file__, "--truth-so-only", so, *paths], check=True,
                          capture_output=True, text=True)
    so_only = json.loads(proc.stdout.strip().splitlines()[-1])
    for p in paths:
        name = os.path.basename(p)
        data = with_package[name]
        data["entry_points_so_only"] = so_only[name]["entry_points"]
        data.update(model=name, builder="build_customop.py",
                    environment=truth.environment("gradaudit_testops (tests/ops_pkg, compiled here)",
                                                  f"built against TensorFlow {tf.__version__}"),
                    load_ops={"entry_points": "import gradaudit_testops (--load-ops gradaudit_testops)",
                              "entry_points_so_only": "tf.load_op_library(_gradaudit_testops.so) only"})
        truth.write(p, data)
        np.savez(os.path.join(p, "inputs.npz"), **_inputs()[name]["serving_default"])
    subprocess.run([os.environ.get("GRADAUDIT_PLAIN_PYTHON", "python3"), os.path.join(HERE, "truth.py"),
                    "census", *paths], check=True)
    for p in paths:
        with open(os.path.join(p, "truth.json"), encoding="utf-8") as f:
            data = json.load(f)
        for field in ("entry_points", "entry_points_so_only"):
            for row in data[field]["serving_default"]["pairs"]:
                print(f"{os.path.basename(p)} [{field}] {row['source']} -> {row['output']}: {row['truth']}")


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--truth-so-only":
        import tensorflow as tf

        tf.load_op_library(sys.argv[2])
        print(json.dumps(truths(sys.argv[3:])))
    else:
        main(sys.argv[1] if len(sys.argv) > 1 else HERE)
