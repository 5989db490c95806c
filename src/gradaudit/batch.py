"""Many models in one run: find the SavedModels named or found under folders, audit each (several at a
time with --jobs), and keep going past a model that cannot be audited."""

from __future__ import annotations

import multiprocessing
import os
import queue
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess

from .api import AuditOptions, audit
from .errors import GradauditError, InternalError
from .kinds import kind_of
from .model import AuditFailure as AuditFailure  # re-exported: the CLI and callers import it from here
from .model import Report
from .targets import GRAPH_FILES, is_saved_model


@dataclass(frozen=True)
class ModelAudit:
    path: str
    reports: tuple[Report, ...] = ()
    failure: AuditFailure | None = None


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
    """The kind's audits of many entry points (a SavedModel's signatures), or else the API's one audit. A path
    that does not exist is said so before anything is read or imported."""
    if missing(target):
        raise GradauditError(f"{target}: no such file or directory")
    each = kind_of(target).audit_each
    if each is None:
        return (audit(target, **vars(options)),)
    return each(target, options, all_signatures)


def missing(target: str) -> bool:
    """A target of a kind named by its path (a SavedModel folder, a Keras file) that does not exist; a Python
    module:attr and a kind registered by others are theirs to resolve."""
    return not os.path.exists(target) and kind_of(target).name in ("saved_model", "keras")


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
    """Audit every model, `jobs` at a time when there are several; results in the order of `paths`."""
    done = on_done or (lambda _audit: None)
    if jobs <= 1 or len(paths) <= 1:
        results = []
        for path in paths:
            results.append(audit_model(path, options, all_signatures, debug))
            done(results[-1])
        return results
    return _Parallel(paths, options, all_signatures, debug, done).run(min(jobs, len(paths)) - 1)


class _Parallel:
    """This process audits models, and so do `workers` worker processes, each taking the next model not yet
    taken. A worker imports TensorFlow once and audits many models. It is given a model only once it has
    imported TensorFlow, so that a run of small models never waits for an import (this process, which has
    imported it already, takes them), and workers still importing at the end are stopped, not awaited."""

    def __init__(self, paths: Sequence[str], options: AuditOptions, all_signatures: bool, debug: bool,
                 done: Callable[[ModelAudit], None]) -> None:
        self.paths, self.options, self.all_signatures, self.debug = paths, options, all_signatures, debug
        self.done = done
        self._next = iter(range(len(paths)))
        self._lock = threading.Lock()
        self._finished: queue.SimpleQueue[tuple[int, ModelAudit | _Raised]] = queue.SimpleQueue()
        self._results: dict[int, ModelAudit] = {}

    def _take(self) -> int | None:
        with self._lock:
            return next(self._next, None)

    def _audit(self, i: int) -> ModelAudit:
        return audit_model(self.paths[i], self.options, self.all_signatures, self.debug)

    def run(self, workers: int) -> list[ModelAudit]:
        # spawn, not fork: TensorFlow's threads do not survive a fork of a process that has imported it.
        context = multiprocessing.get_context("spawn")
        started: dict[Connection, BaseProcess] = {}
        dispatcher = threading.Thread(target=self._dispatch, args=(started,), daemon=True, name="gradaudit-jobs")
        try:
            for _ in range(workers):
                ours, theirs = context.Pipe()
                worker = context.Process(target=_serve, args=(theirs, self.options, self.all_signatures, self.debug),
                                         name="gradaudit-worker")
                worker.start()
                theirs.close()
                started[ours] = worker
            dispatcher.start()
            while (i := self._take()) is not None:
                self._finished.put((i, self._audit(i)))
                self._collect(block=False)
            while len(self._results) < len(self.paths):
                dispatching = dispatcher.is_alive()
                self._collect(block=True)
                if not dispatching and len(self._results) < len(self.paths):  # everything it gave is back
                    raise RuntimeError("the --jobs dispatcher stopped before every model came back")
        finally:
            for process in started.values():
                process.terminate()  # idle, or still importing TensorFlow: nothing of theirs is lost
            for process in started.values():
                process.join()
            if dispatcher.is_alive():
                dispatcher.join()
            for connection in started:
                connection.close()
        return [self._results[i] for i in range(len(self.paths))]

    def _collect(self, block: bool) -> None:
        """Take the audits finished so far (with `block`, wait for one first)."""
        while True:
            try:
                i, outcome = self._finished.get(block=block, timeout=1.0 if block else None)
            except queue.Empty:
                return
            if isinstance(outcome, _Raised):  # --debug: the worker's exception, with its traceback
                raise outcome.error from _RemoteTraceback(outcome.traceback)
            self._results[i] = outcome
            self.done(outcome)
            block = False

    def _dispatch(self, started: dict[Connection, BaseProcess]) -> None:
        """Give each worker that is ready (TensorFlow imported, or its last model done) the next model; a
        worker that ends while it holds a model fails that model, not the run."""
        holding: dict[Connection, int | None] = dict.fromkeys(started)
        while holding:
            for connection in wait(list(holding)):
                assert isinstance(connection, Connection)
                try:
                    message = connection.recv()
                except (EOFError, OSError):  # stopped at the end of the run, or died on its model
                    i = holding.pop(connection)
                    if i is not None:
                        self._finished.put((i, _died(self.paths[i], started[connection])))
                    continue
                held = holding[connection]
                if held is not None:  # else the worker has just imported TensorFlow
                    self._finished.put((held, message))
                i = holding[connection] = self._take()
                if i is None:
                    del holding[connection]  # nothing left to give: it waits to be stopped
                    continue
                try:
                    connection.send(self.paths[i])
                except OSError:
                    del holding[connection]
                    self._finished.put((i, _died(self.paths[i], started[connection])))


def _serve(connection: Connection, options: AuditOptions, all_signatures: bool, debug: bool) -> None:
    """A worker process: import TensorFlow, say it is ready, then audit each model it is sent."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole process group: the parent stops us
    import_tensorflow_quietly()
    try:
        connection.send(None)
        while True:
            path = connection.recv()
            try:
                outcome: ModelAudit | _Raised = audit_model(path, options, all_signatures, debug)
            except Exception as exc:  # noqa: BLE001 - only with --debug: raised again in the parent
                outcome = _Raised(exc, traceback.format_exc())
            connection.send(outcome)
    except (EOFError, OSError):  # the parent ended
        return


@dataclass(frozen=True)
class _Raised:
    error: BaseException
    traceback: str


class _RemoteTraceback(Exception):
    """The traceback of an exception raised in a worker, shown as its cause."""

    def __str__(self) -> str:
        return str(self.args[0])


def _died(path: str, worker: BaseProcess) -> ModelAudit:
    worker.join(5)
    err = InternalError("auditing the model in a worker process",
                        RuntimeError(f"the worker ended with exit code {worker.exitcode}"))
    return ModelAudit(path, failure=AuditFailure(path, f"{path}: {err} (--jobs 1 --debug shows why)"))


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
