"""Run the model-executing part of an audit in a child process, so that `--timeout` can stop it and a
crash inside TensorFlow's kernels cannot take the static report down with it. The child's temporary folders
(the float64 copy) live in one folder the parent owns and removes, whatever ends the run: the child killed
at the timeout, Ctrl-C, or SIGTERM (cli.py turns it into SystemExit)."""

from __future__ import annotations

import multiprocessing
import os
import shutil
import signal
import sys
import tempfile
import traceback
from collections.abc import Callable
from typing import Any


class Timeout(Exception):
    """The child did not finish in time; it has been killed."""


class ChildFailed(Exception):
    """The child died or raised; the message says how."""


def _die_with_parent() -> None:
    """Linux: the kernel kills the child when the parent dies, even by SIGKILL (no orphan at 100% CPU)."""
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass  # no prctl: the parent's kill on its way out is the only guard


def _child(conn, fn: Callable, args: tuple, tmp: str) -> None:
    _die_with_parent()
    tempfile.tempdir = tmp  # every temporary folder of the child is inside the parent's
    os.environ["TMPDIR"] = tmp
    # TensorFlow's start-up chatter would interleave with the parent's output.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        conn.send(("ok", fn(*args)))
    except BaseException as exc:  # noqa: BLE001 - everything goes back to the parent
        conn.send(("error", f"{exc.__class__.__name__}: {exc}", traceback.format_exc()))
    finally:
        conn.close()


def run_isolated(fn: Callable, args: tuple, timeout: float) -> Any:
    """fn(*args) in a fresh (spawned) process; its result must be picklable."""
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    tmp = tempfile.mkdtemp(prefix="gradaudit-run-")
    proc = ctx.Process(target=_child, args=(child, fn, args, tmp), daemon=True)
    try:
        proc.start()
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    child.close()
    try:
        if not parent.poll(timeout):
            raise Timeout(f"did not finish within {timeout:g} s")
        try:
            message = parent.recv()
        except EOFError:
            proc.join(5)
            raise ChildFailed(f"the process running the model died (exit code {proc.exitcode})") from None
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join(5)
        parent.close()
        shutil.rmtree(tmp, ignore_errors=True)
    if message[0] == "error":
        raise ChildFailed(message[1])
    return message[1]
