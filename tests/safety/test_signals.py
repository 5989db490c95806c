"""SIGTERM stops the run cleanly: the child that runs the model ends with it and every temporary folder of
gradaudit (the child's folder, the float64 copy) is removed; exit 128+15, never 1 (findings)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from helpers import save_slow_model

pytestmark = pytest.mark.slow  # signals sent to gradaudit processes


@pytest.fixture(scope="module")
def slow(tmp_path_factory) -> str:
    """A model whose forward pass loops 10^9 times: the run is still in the model when it is stopped."""
    return save_slow_model(str(tmp_path_factory.mktemp("signals") / "slow"))


def _children(pid: int) -> set[int]:
    out = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                out.add(int(entry))
    return out


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _ours(tmp) -> list[str]:
    """gradaudit's temporary folders under `tmp`, at any depth."""
    return sorted(os.path.relpath(os.path.join(folder, d), tmp) for folder, dirs, _ in os.walk(tmp)
                  for d in dirs if d.startswith("gradaudit-"))


@pytest.mark.parametrize("args, ready", [(["--timeout", "900"], "gradaudit-run-"), ([], "gradaudit-f64-")])
def test_sigterm_leaves_no_process_and_no_temporary_folder(slow, tmp_path, args, ready):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp), "TF_CPP_MIN_LOG_LEVEL": "3"}
    proc = subprocess.Popen([sys.executable, "-m", "gradaudit", slow, *args], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    children: set[int] = set()
    try:
        deadline = time.monotonic() + 300  # a bound on waiting, not a claim about speed
        while not any(os.path.basename(p).startswith(ready) for p in _ours(tmp)) and proc.poll() is None:
            assert time.monotonic() < deadline, "the run never reached the model"
            time.sleep(0.2)
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
        time.sleep(1.0)  # let the run enter the model
        children = _children(proc.pid)
        if args:
            assert children, "no child process runs the model"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 128 + signal.SIGTERM
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    deadline = time.monotonic() + 30  # the kernel reaps the killed child
    while any(_alive(c) for c in children) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [c for c in children if _alive(c)]
    assert _ours(tmp) == []
