"""Compile ops.cc into the shared library gradaudit_testops loads, against the installed TensorFlow.

Standalone on purpose (stdlib + tensorflow.sysconfig only, no import of the package, whose import needs the
library this builds)::

    python tests/ops_pkg/gradaudit_testops/build.py OUT_DIR     # prints the path of OUT_DIR/_gradaudit_testops.so

or, from a test fixture::

    compile_ops = runpy.run_path("tests/ops_pkg/gradaudit_testops/build.py")["compile_ops"]
    so = compile_ops(tmp_dir)          # then os.environ["GRADAUDIT_TESTOPS_SO"] = so

-O0 because the time goes into parsing TensorFlow's headers, not into optimising three loops.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(HERE, "ops.cc")
SO_NAME = "_gradaudit_testops.so"


def compile_ops(out_dir: str, compiler: str | None = None) -> str:
    """Compile ops.cc to ``out_dir/_gradaudit_testops.so`` and return that path.

    Raises RuntimeError (with the compiler's last lines) when there is no C++ compiler or it fails."""
    import tensorflow as tf  # only for sysconfig: header and library flags of the TensorFlow that will load it

    cxx = compiler or os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    if not cxx:
        raise RuntimeError("no C++ compiler (g++ / c++ / $CXX) to build gradaudit_testops")
    os.makedirs(out_dir, exist_ok=True)
    so = os.path.join(out_dir, SO_NAME)
    cmd = [cxx, "-shared", "-fPIC", "-O0", "-w", SOURCE, "-o", so,
           *tf.sysconfig.get_compile_flags(), *tf.sysconfig.get_link_flags()]
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-20:])
        raise RuntimeError(f"compiling gradaudit_testops failed ({' '.join(cmd)}):\n{tail}")
    return so


if __name__ == "__main__":
    print(compile_ops(sys.argv[1] if len(sys.argv) > 1 else HERE))
