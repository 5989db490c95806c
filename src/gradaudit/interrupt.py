"""One temporary folder per run, and a clean stop on SIGTERM and Ctrl-C.

Every temporary folder gradaudit makes during a run (the child's, the float64 copy, a traced target's saved
copy) is made inside the run's folder, which the run removes at its end. A signal raises SystemExit(128+n)
in the main thread, so the finally blocks stop the child and remove the folders. When the main thread is
inside a TensorFlow kernel, Python cannot run that handler until the kernel returns: a watcher thread sees the
signal at once (through the wakeup fd), and if the run has not ended after a grace period, removes the run's
folder and ends the process (the child dies with it, see isolate.py). A SIGKILL runs no handler at all: a
small reaper process removes the folder when the run's end of a pipe to it closes."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable

GRACE_SECONDS = 3.0


# Removes the run's folder when the pipe from the run closes, which the kernel does when the run ends however
# it ends, SIGKILL included: a few lines of Python, started without site-packages, in its own session.
_REAPER = "import os, shutil, sys\nwhile os.read(0, 4096):\n    pass\nshutil.rmtree(sys.argv[1], ignore_errors=True)\n"


class RunFolder:
    def __init__(self) -> None:
        self.path = tempfile.mkdtemp(prefix="gradaudit-")
        self._saved = (tempfile.tempdir, os.environ.get("TMPDIR"))
        tempfile.tempdir = self.path
        os.environ["TMPDIR"] = self.path  # child processes too
        self._reaper: subprocess.Popen | None = None
        try:
            self._reaper = subprocess.Popen([sys.executable, "-I", "-S", "-c", _REAPER, self.path],
                                            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                            stderr=subprocess.DEVNULL, start_new_session=True, cwd="/")
        except OSError:
            pass  # the run still removes its folder on every exit it lives to see

    def close(self) -> None:
        tempfile.tempdir, tmpdir = self._saved
        if tmpdir is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = tmpdir
        shutil.rmtree(self.path, ignore_errors=True)
        if self._reaper is not None and self._reaper.stdin is not None:
            self._reaper.stdin.close()
            try:
                self._reaper.wait(5)
            except subprocess.TimeoutExpired:
                self._reaper.kill()


def _watch(read_fd: int, folder: RunFolder, done: threading.Event) -> None:
    while True:
        try:
            data = os.read(read_fd, 16)
        except OSError:
            return
        signums = [b for b in data if b in (signal.SIGTERM, signal.SIGINT)]
        if signums and not done.wait(GRACE_SECONDS):
            shutil.rmtree(folder.path, ignore_errors=True)
            os._exit(128 + signums[0])


def install() -> Callable[[], None]:
    """Start the run: its folder and the signal handling. Returns what ends it (restores both)."""
    folder = RunFolder()
    if threading.current_thread() is not threading.main_thread():
        return folder.close

    def stop(signum, _frame):
        raise SystemExit(128 + signum)

    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    previous = (signal.signal(signal.SIGTERM, stop), signal.signal(signal.SIGINT, stop),
                signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False))
    done = threading.Event()
    threading.Thread(target=_watch, args=(read_fd, folder, done), daemon=True, name="gradaudit-stop").start()

    def end() -> None:
        done.set()
        signal.signal(signal.SIGTERM, previous[0])
        signal.signal(signal.SIGINT, previous[1])
        signal.set_wakeup_fd(previous[2])
        os.close(write_fd)
        os.close(read_fd)
        folder.close()

    return end
