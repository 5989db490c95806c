"""Run the model-executing part of an audit in a child process, so that `--timeout` can stop it, a crash
inside TensorFlow's kernels cannot take the static report down with it, and the model runs with the least
power the platform offers (safety/sandbox.py).

The channel, which a model that gets ops past the gate must not be able to turn into code in the parent:

- The child is a fresh interpreter (`python -m gradaudit._child`), started with no descriptor of the parent's
  but its own end of a Unix socket pair: no multiprocessing forkserver, resource tracker or result pipe to
  reach through `/proc/self/fd`. A socket cannot be opened by path at all (`open("/proc/self/fd/N")` on one
  is ENXIO), so a model's `WriteFile` cannot write into the channel; stdin is read once, before anything of a
  model exists, and replaced by /dev/null; stdout and stderr are /dev/null, never the parent's.
- It imports TensorFlow while it waits for its job (started early, beside the parent's own import), then
  forks the process that runs the model: that one is single-threaded when it confines itself (Landlock
  applies to the calling thread and the threads it starts), and both die with their parent
  (PR_SET_PDEATHSIG). Its environment holds only what Python and TensorFlow read (no tokens or keys).
- The parent sends the job pickled (the parent is trusted; the child reads it before any model is loaded);
  the child sends length-prefixed JSON frames, each size-capped, parsed as data and checked field by field
  by the caller (wire.py). Nothing the child writes is unpickled or executed.

The child's temporary folders (the float64 copy) live in one folder the parent owns and removes, whatever
ends the run."""

from __future__ import annotations

import atexit
import json
import os
import pickle
import re
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from .model import Isolation
from .progress import observed, say
from .wire import WireError, decode, encode

MAX_FRAME = 64 << 20  # one message; a report of a large model is a few MiB
MAX_TOTAL = 256 << 20  # everything one child may send
_HEADER = struct.Struct("!I")
_KINDS = ("started", "confined", "say", "ok", "error")


class Timeout(Exception):
    """The child did not finish within `seconds`; it has been killed."""

    def __init__(self, seconds: float):
        super().__init__(f"did not finish within {seconds:g} s")
        self.seconds = seconds


class ChildFailed(Exception):
    """The child died, raised or sent what is not a result; the message says how."""


class Stopped(Exception):
    """The child did not bring a result: `reason` (a Timeout or ChildFailed) and the isolation it ran under."""

    def __init__(self, reason: Timeout | ChildFailed, isolation: Isolation):
        super().__init__(str(reason))
        self.reason, self.isolation = reason, isolation


# --- the child's side -------------------------------------------------------------------------------------

def die_with_parent(parent: int) -> None:
    """Linux: the kernel kills this process when its parent dies, even by SIGKILL (no orphan at 100% CPU);
    and if the parent is already gone, this process ends now."""
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass  # no prctl: the parent's kill on its way out is the only guard
    if os.getppid() != parent:
        os._exit(3)


def send_frame(sock: socket.socket, kind: str, data: Any) -> None:
    body = json.dumps({"kind": kind, "data": data}).encode()
    sock.sendall(_HEADER.pack(len(body)) + body)


def serve(sock_fd: int) -> None:
    """The child started by `_spawn`, after its TensorFlow import: read the one job, fork the process that
    runs it, and end as that process ends (its exit status, or the signal that killed it)."""
    sock = socket.socket(fileno=sock_fd)
    try:
        job = pickle.load(sys.stdin.buffer)  # written by the parent before anything of a model exists
    except (EOFError, pickle.UnpicklingError):
        os._exit(0)  # a spare the parent did not use
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.close(devnull)
    me = os.getpid()
    pid = os.fork()
    if pid == 0:
        try:
            die_with_parent(me)
            _run_job(sock, *job)
        finally:
            os._exit(0)
    sock.close()
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code < 0:  # say how it died: the same signal
        signal.signal(-code, signal.SIG_DFL)
        os.kill(me, -code)
    os._exit(code)


def _run_job(sock: socket.socket, fn: Callable, args: tuple, tmp: str, readable: tuple[str, ...],
             memory_limit: int | None) -> None:
    from .safety.sandbox import confine

    tempfile.tempdir = tmp  # every temporary folder of the child is inside the parent's
    os.environ["TMPDIR"] = tmp
    os.environ["KERAS_HOME"] = tmp  # Keras reads (or writes) its configuration there, not in the home folder
    try:
        send_frame(sock, "started", os.getpid())
        send_frame(sock, "confined", encode(confine(readable, tmp, memory_limit)))  # before the model is read
        with observed(lambda message: send_frame(sock, "say", message)):  # the parent's status line shows the stage
            result = fn(*args)
        send_frame(sock, "ok", result)
    except BaseException as exc:  # noqa: BLE001 - everything goes back to the parent, as text
        send_frame(sock, "error", f"{exc.__class__.__name__}: {exc}"[:4096])
        if os.environ.get("GRADAUDIT_DEBUG_CHILD"):
            traceback.print_exc()
    finally:
        sock.close()


# --- the parent's side ------------------------------------------------------------------------------------

# What the child's environment keeps: what Python, TensorFlow, its math libraries and the locale read.
# Everything else (CI tokens, cloud keys) never reaches a process that runs a model.
_ENV_KEEP = ("PATH", "HOME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "VIRTUAL_ENV", "CONDA_PREFIX", "LD_LIBRARY_PATH")
_ENV_PREFIXES = ("LC_", "PYTHON", "TF_", "XLA_", "CUDA", "NVIDIA_", "OMP_", "KMP_", "MKL_", "OPENBLAS_",
                 "KERAS_", "GRADAUDIT_")


# Names that hold secrets whatever their prefix: Terraform's TF_TOKEN_<host> and TF_VAR_<name> share
# TensorFlow's TF_ prefix.
_ENV_SECRET = re.compile(r"TOKEN|SECRET|PASSW|CREDENTIAL|AUTH|KEY|COOKIE|SESSION|PRIVATE|^TF_VAR_|^TF_CLI_",
                         re.IGNORECASE)


def child_environment(environ: dict[str, str] | None = None) -> dict[str, str]:
    source = os.environ if environ is None else environ
    env = {k: v for k, v in source.items()
           if (k in _ENV_KEEP or k.startswith(_ENV_PREFIXES)) and not _ENV_SECRET.search(k)}
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    env.setdefault("GRPC_VERBOSITY", "ERROR")
    return env


@dataclass
class _Child:
    proc: subprocess.Popen
    sock: socket.socket
    worker: int | None = None  # the forked process that runs the model, once it said so
    buffer: bytearray = field(default_factory=bytearray)
    received: int = 0

    def kill(self) -> None:
        for pid in (self.worker, self.proc.pid):
            if pid:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            pass
        self.sock.close()
        if self.proc.stdin:
            try:
                self.proc.stdin.close()
            except OSError:
                pass

    def resident(self) -> int | None:
        """The model's process, once it said which it is (the one it is forked from only imports TensorFlow,
        then waits)."""
        return _resident(self.worker) if self.worker else None

    def frames(self) -> list[dict[str, Any]]:
        """The complete messages received so far; ChildFailed for anything that is not one."""
        try:
            data = self.sock.recv(1 << 20)
        except BlockingIOError:
            return []
        if not data:
            raise EOFError
        self.received += len(data)
        if self.received > MAX_TOTAL:
            raise ChildFailed(f"the process running the model sent more than {MAX_TOTAL >> 20} MiB")
        self.buffer += data
        out = []
        while len(self.buffer) >= _HEADER.size:
            (size,) = _HEADER.unpack_from(self.buffer)
            if size > MAX_FRAME:
                raise ChildFailed("the process running the model sent a message over the size cap")
            if len(self.buffer) < _HEADER.size + size:
                break
            body = bytes(self.buffer[_HEADER.size:_HEADER.size + size])
            del self.buffer[:_HEADER.size + size]
            out.append(_message(body))
        return out


def _message(body: bytes) -> dict[str, Any]:
    try:
        message = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise ChildFailed("the process running the model sent a message that is not JSON") from None
    if not isinstance(message, dict) or message.get("kind") not in _KINDS or set(message) != {"kind", "data"}:
        raise ChildFailed("the process running the model sent a message of no known kind")
    return message


def _spawn() -> _Child:
    parent_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gradaudit._child", str(os.getpid()), str(child_end.fileno())],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            pass_fds=(child_end.fileno(),), close_fds=True, env=child_environment(), cwd="/")
    except BaseException:
        parent_end.close()
        raise
    finally:
        child_end.close()
    parent_end.setblocking(False)
    return _Child(proc, parent_end)


_SPARE: dict[str, Any] = {"child": None, "keep": False}


def prestart(keep_warm: bool = False) -> None:
    """Start now the child the next audit will use, so that its TensorFlow import runs beside the caller's
    own; `keep_warm`: after each one is taken, start the next (many models in one run)."""
    _SPARE["keep"] = _SPARE["keep"] or keep_warm
    if _SPARE["child"] is None:
        _SPARE["child"] = _spawn()


def _take() -> _Child:
    child, _SPARE["child"] = _SPARE["child"], None
    if child is None or child.proc.poll() is not None:
        if child is not None:
            child.kill()
        child = _spawn()
    if _SPARE["keep"]:
        _SPARE["child"] = _spawn()
    return child


@atexit.register
def _drop_spare() -> None:
    child, _SPARE["child"] = _SPARE["child"], None
    if child is not None:
        child.kill()


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


def _died(exitcode: int | None, memory_limit: int | None) -> ChildFailed:
    how = f"exit code {exitcode}"
    if exitcode is not None and exitcode < 0:
        how = f"killed by {signal.Signals(-exitcode).name}" if -exitcode in signal.valid_signals() else how
        if memory_limit:  # TensorFlow aborts or faults on some failed allocations instead of raising
            how += f"; it may have reached its memory limit of {_gib(memory_limit)} (--memory-limit)"
    return ChildFailed(f"the process running the model died ({how})")


def _shown(text: Any) -> str:
    """A status line from the child, as text a terminal shows as it is (no control characters)."""
    if not isinstance(text, str):
        raise ChildFailed("the process running the model sent a status that is not text")
    return "".join(c if c.isprintable() else "?" for c in text[:300])


class _Session:
    """One child's messages, read as they come: which process runs the model, what confined it, and its
    result or error."""

    def __init__(self, child: _Child, memory_limit: int | None):
        self.child, self.memory_limit = child, memory_limit
        self.isolation: Isolation | None = None
        self.outcome: dict[str, Any] | None = None

    def take(self, message: dict[str, Any]) -> None:
        kind, data = message["kind"], message["data"]
        if self.outcome is not None:
            return  # nothing after the result counts
        if kind == "started":
            if self.child.worker is None and isinstance(data, int) and not isinstance(data, bool) and data > 0:
                self.child.worker = data
        elif kind == "confined":
            if self.isolation is None:
                try:
                    self.isolation = decode(Isolation, data, "isolation")
                except WireError as exc:
                    raise ChildFailed(f"the process running the model sent a malformed isolation ({exc})") from None
        elif kind == "say":
            say(_shown(data))
        elif kind == "error" and not isinstance(data, str):
            raise ChildFailed("the process running the model sent an error that is not text")
        else:
            self.outcome = message

    def drain(self) -> None:
        """What is still in the socket when the parent stops the child (the isolation may have arrived after
        the parent's last look)."""
        try:
            while self.outcome is None:
                frames = self.child.frames()
                if not frames:
                    return
                for message in frames:
                    self.take(message)
        except (EOFError, OSError, ChildFailed):
            pass

    def in_force(self, timeout: float | None) -> Isolation:
        """What bounded the child: the parent's limits, and what the child could put in force itself (the
        memory limit is the one the parent watches; RLIMIT_DATA only backs it up)."""
        confined = self.isolation
        if confined is None:  # it died before it could confine itself
            confined = Isolation(None, None, None, None, ("the process died before it was confined",))
        return replace(confined, time_budget_s=timeout,
                       memory_limit_bytes=self.memory_limit if confined.memory_limit_bytes else None)


def run_isolated(fn: Callable, args: tuple, timeout: float | None, readable: tuple[str, ...],
                 memory_limit: int | None = None) -> tuple[Any, Isolation]:
    """fn(*args) in a fresh, confined process that reads `readable` (files or folders: the model, --inputs)
    and the Python environment, with at most `memory_limit` bytes of resident memory and `timeout` seconds
    (None: no bound). `fn` and `args` must be picklable and fn's result made of JSON values: the caller
    checks it (wire.decode). Returns the result and the isolation that was in force; raises Stopped when no
    result came."""
    tmp = tempfile.mkdtemp(prefix="gradaudit-run-")
    data_limit = memory_limit + _DATA_SLACK if memory_limit else None
    try:
        child = _take()
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    session = _Session(child, memory_limit)
    try:
        try:
            assert child.proc.stdin is not None
            child.proc.stdin.write(pickle.dumps((fn, args, tmp, readable, data_limit)))
            child.proc.stdin.close()
        except (BrokenPipeError, OSError):
            pass  # it died: its end of the socket says so below
        _watch(session, timeout)
    finally:
        child.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    assert session.outcome is not None
    if session.outcome["kind"] == "error":
        raise Stopped(ChildFailed(session.outcome["data"]), session.in_force(timeout))
    if session.isolation is None:
        raise Stopped(ChildFailed("the process running the model sent a result before it was confined"),
                      session.in_force(timeout))
    return session.outcome["data"], session.in_force(timeout)


def _watch(session: _Session, timeout: float | None) -> None:
    child, memory_limit = session.child, session.memory_limit
    deadline = None if timeout is None else time.monotonic() + timeout
    while session.outcome is None:
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        ready, _, _ = select.select([child.sock], [], [], _POLL_S if left is None else min(left, _POLL_S))
        if not ready:
            if timeout is not None and left is not None and left <= _POLL_S:
                session.drain()
                raise Stopped(Timeout(timeout), session.in_force(timeout))
            used = child.resident() if memory_limit else None
            if used is not None and memory_limit and used > memory_limit:
                session.drain()
                raise Stopped(ChildFailed(f"the process running the model used more than its memory limit "
                                          f"of {_gib(memory_limit)} (--memory-limit) and was stopped"),
                              session.in_force(timeout))
            continue
        try:
            for message in child.frames():
                session.take(message)
        except EOFError:
            try:
                code = child.proc.wait(5)
            except subprocess.TimeoutExpired:
                code = None
            raise Stopped(_died(code, memory_limit), session.in_force(timeout)) from None
        except ChildFailed as exc:
            raise Stopped(exc, session.in_force(timeout)) from None
