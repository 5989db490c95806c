"""Wall time and peak memory of a command's whole process tree (Linux: read from /proc, no dependency).

`measure(command)` runs the command and polls, every `interval` seconds, the resident memory (RSS, from
/proc/PID/statm) of every process descending from this one, summed; the peak of that sum is the tree's peak
RSS. gradaudit runs a parent and a confined child at once, so the sum is what the machine had to hold (pages
shared between them, TensorFlow's libraries mapped in both, are counted once per process, as RSS does). The
proportional set size (PSS, /proc/PID/smaps_rollup: shared pages split between their processes) is summed
too, every `pss_every`-th poll, as the figure without that double count.

This process makes itself a child subreaper (prctl PR_SET_CHILD_SUBREAPER), so a descendant whose parent
exits is re-parented here, not to init, and stays in the tree; the poll starts from this process, so only
one measured command may run at a time. The peak is a sample: an allocation that lives for less than the
interval can be missed.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import subprocess
import threading
import time
from dataclasses import dataclass, field

PAGE = os.sysconf("SC_PAGE_SIZE")
_PR_SET_CHILD_SUBREAPER = 36


def _subreaper() -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def _parents() -> dict[int, int]:
    """Every process's parent, by pid."""
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        out[int(name)] = int(stat[stat.rindex(b")") + 2:].split()[1])
    return out


def descendants(root: int) -> dict[int, int]:
    """Every process descending from `root`, with its parent's pid."""
    parents = _parents()
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    found, todo = {}, list(children.get(root, ()))
    while todo:
        pid = todo.pop()
        found[pid] = parents[pid]
        todo.extend(children.get(pid, ()))
    return found


def statm(pid: int) -> tuple[int, int]:
    """(RSS, data) in bytes: resident memory, and the data and stack address space (what RLIMIT_DATA bounds,
    resident or not)."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            fields = f.read().split()
        return int(fields[1]) * PAGE, int(fields[5]) * PAGE
    except (OSError, IndexError, ValueError):
        return 0, 0


def rss(pid: int) -> int:
    return statm(pid)[0]


def pss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
            for line in f:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, IndexError, ValueError):
        pass
    return 0


def _name(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            words = f.read().split(b"\0")
    except OSError:
        return "?"
    text = " ".join(w.decode(errors="replace") for w in words if w)
    return text[:80]


@dataclass
class Measured:
    command: list[str]
    seconds: float
    returncode: int
    stdout: str
    stderr: str
    peak_rss: int = 0                 # bytes: the largest sum over the tree at one poll
    peak_pss: int = 0                 # bytes: the same for PSS, polled less often
    peak_processes: int = 0           # the most processes alive at once (zombies, whose RSS is 0, not counted)
    # pid: {"ppid", "name", "peak_rss", "peak_data" (statm's data + stack), "first_s", "last_s", "last_rss"}
    per_process: dict[int, dict] = field(default_factory=dict)
    polls: int = 0
    cpu_s: float = 0.0                # user + system of the descendants this process and theirs waited for
    lingered_s: float = 0.0           # how long descendants outlived the command (at most `linger`)
    timeline: list = field(default_factory=list)   # (seconds, tree RSS bytes), about every `every` seconds

    def summary(self) -> dict:
        return {"seconds": self.seconds, "returncode": self.returncode, "peak_rss_bytes": self.peak_rss,
                "peak_pss_bytes": self.peak_pss, "peak_processes": self.peak_processes, "polls": self.polls,
                "cpu_s": self.cpu_s, "lingered_s": self.lingered_s, "timeline": self.timeline,
                "processes": sorted(self.per_process.values(), key=lambda p: -p["peak_rss"])}


def measure(command: list[str], env: dict[str, str] | None = None, interval: float = 0.025,
            pss_every: int = 8, cwd: str | None = None, linger: float = 60.0, every: float = 1.0) -> Measured:
    """Run `command` (stdout and stderr captured) and measure its wall time and its tree's peak memory."""
    _subreaper()
    me = os.getpid()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    stop = threading.Event()
    state = {"rss": 0, "pss": 0, "n": 0, "polls": 0, "per": {}, "timeline": [], "next": 0.0}
    start = time.perf_counter()

    def poll() -> None:
        while True:
            pids = descendants(me)
            now = round(time.perf_counter() - start, 3)
            total = 0
            for pid, ppid in pids.items():
                r, data = statm(pid)
                total += r
                if pid not in state["per"]:
                    state["per"][pid] = {"pid": pid, "ppid": ppid, "name": _name(pid), "peak_rss": 0,
                                         "peak_data": 0, "first_s": now}
                entry = state["per"][pid]
                entry["peak_rss"], entry["last_s"], entry["last_rss"] = max(entry["peak_rss"], r), now, r
                entry["peak_data"] = max(entry["peak_data"], data)
            state["rss"] = max(state["rss"], total)
            if now >= state["next"]:  # a coarse timeline: (seconds, tree RSS) every `every` seconds
                state["timeline"].append((now, total))
                state["next"] = now + every
            state["n"] = max(state["n"], sum(1 for pid in pids if state["per"][pid]["last_rss"]))
            if state["polls"] % pss_every == 0:
                state["pss"] = max(state["pss"], sum(pss(pid) for pid in pids))
            state["polls"] += 1
            if stop.wait(interval):
                return

    proc = subprocess.Popen(command, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    watcher = threading.Thread(target=poll, daemon=True)
    watcher.start()
    stdout, stderr = proc.communicate()
    seconds = time.perf_counter() - start
    # descendants re-parented here (their parent exited first) are waited for, and measured, until they end
    deadline = time.perf_counter() + linger
    while descendants(me) and time.perf_counter() < deadline:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(-1, os.WNOHANG)
        time.sleep(interval)
    lingered = time.perf_counter() - start - seconds
    stop.set()
    watcher.join()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Measured(command, seconds, proc.returncode, stdout, stderr, state["rss"], state["pss"], state["n"],
                    state["per"], state["polls"], cpu, lingered, state["timeline"])


def gib(n: float) -> str:
    return f"{n / (1 << 30):.2f} GiB"
