"""Run the model-executing part of an audit in a child process, so that `--timeout` can stop it, a crash
inside TensorFlow's kernels cannot take the static report down with it, and the model runs with the least
power the platform offers (safety/sandbox.py: the child confines itself before it imports TensorFlow). The
child's temporary folders (the float64 copy) live in one folder the parent owns and removes, whatever ends
the run: the child killed at the timeout, Ctrl-C, or SIGTERM (cli.py turns it into SystemExit)."""

from __future__ import annotations

import multiprocessing
import os
import shutil
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from .model import Isolation
from .progress import observed, say
from .safety.sandbox import confine


class Timeout(Exception):
    """The child did not finish in time; it has been killed."""


class ChildFailed(Exception):
    """The child died or raised; the message says how."""


class Stopped(Exception):
    """The child did not bring a result: `reason` (a Timeout or ChildFailed) and the isolation it ran under."""

    def __init__(self, reason: Timeout | ChildFailed, isolation: Isolation):
        super().__init__(str(reason))
        self.reason, self.isolation = reason, isolation


def _die_with_parent() -> None:
    """Linux: the kernel kills the child when the parent dies, even by SIGKILL (no orphan at 100% CPU)."""
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass  # no prctl: the parent's kill on its way out is the only guard


def _child(conn, fn: Callable, args: tuple, tmp: str, readable: tuple[str, ...], memory_limit: int | None) -> None:
    _die_with_parent()
    tempfile.tempdir = tmp  # every temporary folder of the child is inside the parent's
    os.environ["TMPDIR"] = tmp
    os.environ["KERAS_HOME"] = tmp  # Keras reads (or writes) its configuration there, not in the home folder
    # TensorFlow's start-up chatter would interleave with the parent's output.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        conn.send(("confined", confine(readable, tmp, memory_limit)))  # before anything of the model is read
        with observed(lambda message: conn.send(("say", message))):  # the parent's status line shows the stage
            result = fn(*args)
        conn.send(("ok", result))
    except BaseException as exc:  # noqa: BLE001 - everything goes back to the parent
        conn.send(("error", f"{exc.__class__.__name__}: {exc}", traceback.format_exc()))
    finally:
        conn.close()


# The child's memory is bounded twice: the parent stops it when its resident memory passes the limit (a clear
# reason), and RLIMIT_DATA, set by the child on itself, makes an allocation far past the limit fail at once
# (an allocation the parent's polling would only see late). RLIMIT_DATA counts address space the child
# reserves without using (thread stacks, the static pass's deep stack): hence the slack.
_DATA_SLACK = 1 << 30
_POLL_S = 0.1


def _gib(n: int) -> str:
    return f"{n / (1 << 30):.3g} GiB"


def _resident(pid: int) -> int | None:
    """Resident memory of a process in bytes (Linux); None where /proc does not say."""
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def _confined(parent, isolation: Isolation | None) -> Isolation | None:
    """The isolation the child reported, read from what is still in the pipe when the parent stops it (the
    message may have arrived after the parent's last look)."""
    try:
        while isolation is None and parent.poll(0):
            message = parent.recv()
            if message[0] == "confined":
                isolation = message[1]
    except (EOFError, OSError):
        pass
    return isolation


def _died(exitcode: int | None, memory_limit: int | None) -> ChildFailed:
    how = f"exit code {exitcode}"
    if exitcode is not None and exitcode < 0:
        how = f"killed by {signal.Signals(-exitcode).name}" if -exitcode in signal.valid_signals() else how
        if memory_limit:  # TensorFlow aborts or faults on some failed allocations instead of raising
            how += f"; it may have reached its memory limit of {_gib(memory_limit)} (--memory-limit)"
    return ChildFailed(f"the process running the model died ({how})")


_FORKSERVER = {"failed": False}  # it could not start here (a socket path too long, no AF_UNIX): spawn


def prestart() -> None:
    """Start now the server that the children running models fork from, importing TensorFlow there once (a
    forkserver with TensorFlow preloaded): started before the caller imports TensorFlow itself, both imports
    run side by side, and each model's child then starts in a fraction of a second instead of importing
    TensorFlow again. Only the children read the model, each after confining itself; the server imports
    TensorFlow and forks, nothing else. Where the platform has no forkserver, children are spawned."""
    if _FORKSERVER["failed"] or "forkserver" not in multiprocessing.get_all_start_methods():
        return
    from multiprocessing import forkserver, util

    # The server's socket lives in multiprocessing's own folder, which multiprocessing removes at exit: made
    # beside the run's folder (interrupt.py), not in it, which is removed first.
    here = tempfile.gettempdir()
    saved, tempfile.tempdir = tempfile.tempdir, (os.path.dirname(here) if os.path.basename(here).startswith(
        "gradaudit-") else here)
    try:
        util.get_temp_dir()
    finally:
        tempfile.tempdir = saved
    multiprocessing.set_forkserver_preload(["gradaudit._warm"])
    try:
        forkserver.ensure_running()
    except OSError:  # e.g. a temporary folder so deep that the server's socket path is too long
        _FORKSERVER["failed"] = True


def _context():
    if "forkserver" in multiprocessing.get_all_start_methods():
        prestart()  # a no-op once the server runs
        if not _FORKSERVER["failed"]:
            return multiprocessing.get_context("forkserver")
    return multiprocessing.get_context("spawn")


def run_isolated(fn: Callable, args: tuple, timeout: float | None, readable: tuple[str, ...],
                 memory_limit: int | None = None) -> tuple[Any, Isolation]:
    """fn(*args) in a fresh process (forked from the prestarted server, or spawned) confined to reading
    `readable` (files or folders: the model,
    --inputs) and the Python environment, with at most `memory_limit` bytes of resident memory and `timeout`
    seconds (None: no bound); its result must be picklable. Returns the result and the isolation that was in
    force; raises Stopped when no result came."""
    ctx = _context()
    parent, child = ctx.Pipe(duplex=False)
    tmp = tempfile.mkdtemp(prefix="gradaudit-run-")
    data_limit = memory_limit + _DATA_SLACK if memory_limit else None
    proc = ctx.Process(target=_child, args=(child, fn, args, tmp, readable, data_limit), daemon=True)
    try:
        proc.start()
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    child.close()
    deadline = None if timeout is None else time.monotonic() + timeout
    isolation: Isolation | None = None

    def in_force(confined: Isolation | None) -> Isolation:
        """What bounded the child: the parent's limits, and what the child could put in force itself (the
        memory limit is the one the parent watches; RLIMIT_DATA only backs it up)."""
        if confined is None:  # it died before it could confine itself
            confined = Isolation(None, None, None, None, ("the process died before it was confined",))
        return replace(confined, time_budget_s=timeout,
                       memory_limit_bytes=memory_limit if confined.memory_limit_bytes else None)

    try:
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not parent.poll(_POLL_S if left is None else min(left, _POLL_S)):
                if left is not None and left <= _POLL_S:
                    raise Stopped(Timeout(f"did not finish within {timeout:g} s"),
                                  in_force(_confined(parent, isolation)))
                used = _resident(proc.pid) if memory_limit and proc.pid else None
                if used is not None and memory_limit and used > memory_limit:
                    raise Stopped(ChildFailed(f"the process running the model used more than its memory limit "
                                              f"of {_gib(memory_limit)} (--memory-limit) and was stopped"),
                                  in_force(_confined(parent, isolation)))
                continue
            try:
                message = parent.recv()
            except EOFError:
                proc.join(5)
                raise Stopped(_died(proc.exitcode, memory_limit), in_force(isolation)) from None
            if message[0] == "say":
                say(message[1])
            elif message[0] == "confined":
                isolation = message[1]
            else:
                break
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join(5)
        parent.close()
        shutil.rmtree(tmp, ignore_errors=True)
    if message[0] == "error":
        raise Stopped(ChildFailed(message[1]), in_force(isolation))
    assert isolation is not None  # the child confines itself before it runs anything
    return message[1], in_force(isolation)
