"""Many models in one run: find the SavedModels named or found under folders, audit each (in worker
processes with --jobs), and keep going past a model that cannot be audited."""

from __future__ import annotations

import multiprocessing
import os
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass

from .api import AuditOptions, audit, audit_saved_model, signature_keys
from .errors import GradauditError, InternalError
from .model import AuditFailure, Report
from .report.common import GRAPH_FILES


@dataclass(frozen=True)
class ModelAudit:
    path: str
    reports: tuple[Report, ...] = ()
    failure: AuditFailure | None = None


def is_saved_model(path: str) -> bool:
    return any(os.path.isfile(os.path.join(path, name)) for name in GRAPH_FILES)


def find_models(paths: Sequence[str], recursive: bool = False) -> list[str]:
    """The model folders to audit, in order, each once. A `saved_model.pb` names its folder (that is what
    pre-commit passes); with `recursive`, a folder that is not a SavedModel is searched for SavedModels,
    skipping hidden folders (.git, .venv)."""
    found: dict[str, str] = {}
    for path in paths:
        if os.path.basename(os.path.normpath(path)) in GRAPH_FILES and os.path.isfile(path):
            path = os.path.dirname(path) or "."
        if os.path.isdir(path) and not is_saved_model(path) and recursive:
            inside = _search(path)
            if not inside:
                raise GradauditError(f"{path}: no SavedModel found under it")
        else:
            inside = [path]  # a missing path or a folder that is not a SavedModel is reported by the
            # audit, with the other models' results
        for p in inside:
            found.setdefault(os.path.realpath(p), p)
    return list(found.values())


def _search(root: str) -> list[str]:
    models = []
    for folder, dirs, _files in os.walk(root):
        dirs.sort()
        if is_saved_model(folder):
            models.append(folder)
            dirs.clear()  # a SavedModel's assets and variables are not models
        else:
            dirs[:] = [d for d in dirs if not d.startswith(".")]
    return models


def _audit(target: str, options: AuditOptions, all_signatures: bool) -> tuple[Report, ...]:
    if all_signatures or _only_saved_functions(target, options):
        # a SavedModel's signatures; for a model saved without any (the default signature asked), its saved
        # functions, each by its stable name
        return tuple(audit_saved_model(target, options, key) for key in signature_keys(target, options.tags))
    return (audit(target, **vars(options)),)  # any target: SavedModel, Keras file, module:attr


def _only_saved_functions(target: str, options: AuditOptions) -> bool:
    if options.signature != AuditOptions.signature or not is_saved_model(target):
        return False
    from .targets.saved_model import SavedModelFile

    try:
        return not SavedModelFile(target, options.tags).signature_keys()
    except GradauditError:
        return False  # reported by the audit itself


def audit_model(path: str, options: AuditOptions, all_signatures: bool = False, debug: bool = False) -> ModelAudit:
    """Audit one model's signature (or every signature); an error becomes a failure, unless `debug`."""
    try:
        return ModelAudit(path, _audit(path, options, all_signatures))
    except GradauditError as exc:
        if debug:
            raise
        return ModelAudit(path, failure=AuditFailure(path, str(exc)))
    except InternalError as exc:  # gradaudit's failure: said so, and the report as far as it got is kept
        if debug:
            raise
        partial = (exc.report,) if exc.report is not None else ()
        return ModelAudit(path, partial, AuditFailure(path, f"{path}: {exc} (--debug shows the traceback)"))
    except Exception as exc:
        if debug:
            raise
        err = InternalError("auditing the model", exc)
        return ModelAudit(path, failure=AuditFailure(path, f"{path}: {err} (--debug shows the traceback)"))


def audit_models(paths: Sequence[str], options: AuditOptions, *, all_signatures: bool = False, jobs: int = 1,
                 debug: bool = False, on_done: Callable[[ModelAudit], None] | None = None) -> list[ModelAudit]:
    """Audit every model, in `jobs` worker processes when there are several; results in the order of `paths`."""
    done = on_done or (lambda _audit: None)
    if jobs <= 1 or len(paths) <= 1:
        results = []
        for path in paths:
            results.append(audit_model(path, options, all_signatures, debug))
            done(results[-1])
        return results
    # spawn, not fork: TensorFlow's threads do not survive a fork of a process that has imported it.
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=min(jobs, len(paths)), mp_context=context,
                             initializer=import_tensorflow_quietly) as pool:
        futures = [pool.submit(audit_model, p, options, all_signatures, debug) for p in paths]
        for future in as_completed(futures):
            done(future.result())
        return [f.result() for f in futures]


def import_tensorflow_quietly() -> None:
    """Import TensorFlow with its C++ start-up chatter (CUDA probes, oneDNN, absl) sent to /dev/null:
    it is not for our users, and it must not mix with our one-line errors on stderr."""
    if "tensorflow" in sys.modules:
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        import tensorflow

        # TensorFlow's Python warnings (reference variables of TF1 models, retracing) are not findings:
        # what matters reaches the report as a note or a result.
        tensorflow.get_logger().setLevel("ERROR")
        # absl's Python logger too: loading a jax2tf export warns about its custom gradients on every call
        import logging

        logging.getLogger("absl").setLevel(logging.ERROR)
    except ImportError:
        pass  # reported where TensorFlow is used
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)
