"""Run the model-executing part of an audit in a child process, so that `--timeout` can stop it and a
crash inside TensorFlow's kernels cannot take the static report down with it."""

from __future__ import annotations

import multiprocessing
import os
import traceback
from typing import Any, Callable


class Timeout(Exception):
    """The child did not finish in time; it has been killed."""


class ChildFailed(Exception):
    """The child died or raised; the message says how."""


def _child(conn, fn: Callable, args: tuple) -> None:
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
    proc = ctx.Process(target=_child, args=(child, fn, args), daemon=True)
    proc.start()
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
    if message[0] == "error":
        raise ChildFailed(message[1])
    return message[1]
