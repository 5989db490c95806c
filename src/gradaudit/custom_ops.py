"""--load-ops: make a custom op library's ops (and the gradients its package registers) known before an audit.

A Python package (`tensorflow_text`, `tensorflow_decision_forests`, ...) is imported, which registers its op
definitions and gradients; a shared library (`path/to/ops.so`) is loaded with `tf.load_op_library`. Both run
code, so they come only from the command line or a configuration file, never from the model.
"""

from __future__ import annotations

import importlib
import os

from .errors import GradauditError

_loaded: set[str] = set()


def is_library(spec: str) -> bool:
    return spec.endswith((".so", ".dylib", ".dll")) or os.sep in spec


def load_ops(specs: tuple[str, ...] | list[str]) -> None:
    """Import each package or load each shared library once per process; a failure is a usage error."""
    new = [s for s in specs if s not in _loaded]
    if not new:
        return
    import tensorflow as tf

    from .graph.gradients import registry_kind

    # tensorflow_decision_forests 1.12 imports IPython at import time (a welcome message for notebooks) whenever
    # stdout is not file descriptor 1 or 2: piped, and always in the process that runs the model (/dev/null).
    os.environ.setdefault("TFDF_DISABLE_WELCOME_MESSAGE", "1")
    for spec in new:
        try:
            if is_library(spec):
                if not os.path.isfile(spec):
                    raise GradauditError(f"--load-ops {spec}: no such file")
                tf.load_op_library(os.path.abspath(spec))
            else:
                importlib.import_module(spec)
        except GradauditError:
            raise
        except ModuleNotFoundError as exc:
            raise GradauditError(f"--load-ops {spec}: no module named {exc.name!r} in this environment "
                                 "(install the package, or pass the path of a .so file)") from None
        except Exception as exc:  # noqa: BLE001 - whatever the package raises is reported on one line
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            raise GradauditError(f"--load-ops {spec}: cannot load it ({exc.__class__.__name__}: {first})") from None
        _loaded.add(spec)
    registry_kind.cache_clear()  # op types and gradients registered since are now known
