"""Speed of `--jobs`, measured in one run (never asserted in tests).

`gradaudit M1 M2 M3 M4` on four small sample models (sample_models/, committed SavedModels), as whole
processes: `--jobs 1`, `--jobs 2` and the default, run in turn (a round of the three, `--repeat` rounds, so
that load from elsewhere on the machine falls on all three alike). Prints each run's wall time and CPU time
(user + system of the whole process tree: workers and the children that run the models; it moves much less
than wall time when others load the machine), the medians, and the ratios to `--jobs 1`. Target: `--jobs 2`
no slower than `--jobs 1` for small models; the default never slower than serial.

Usage: python bench/bench_jobs.py [--repeat N] [--models NAME ...]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMALL = ("mlp", "cnn", "softplus", "ratio_stable")
VARIANTS = {"--jobs 1": ["--jobs", "1"], "--jobs 2": ["--jobs", "2"], "default": []}


def timed(args: list[str]) -> tuple[float, float, int]:
    """Wall seconds, CPU seconds of the process tree, exit code of one `python -m gradaudit` run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "gradaudit", *args], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL, check=False)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="rounds of the three runs (default 3)")
    parser.add_argument("--models", nargs="+", default=list(SMALL), metavar="NAME",
                        help="sample models under sample_models/ (default: %(default)s)")
    args = parser.parse_args()
    models = [os.path.join(ROOT, "sample_models", m) for m in args.models]
    times: dict[str, list[float]] = {name: [] for name in VARIANTS}
    cpu: dict[str, list[float]] = {name: [] for name in VARIANTS}
    codes: dict[str, set[int]] = {name: set() for name in VARIANTS}
    print(f"{len(models)} models: {', '.join(args.models)}; {os.cpu_count()} cores; {args.repeat} round(s)")
    for round_ in range(args.repeat):
        for name, extra in VARIANTS.items():
            seconds, cpu_seconds, code = timed([*models, *extra])
            times[name].append(seconds)
            cpu[name].append(cpu_seconds)
            codes[name].add(code)
            print(f"  round {round_ + 1}: {name:<9} wall {seconds:6.2f} s  cpu {cpu_seconds:6.2f} s (exit {code})",
                  flush=True)
    serial, serial_cpu = statistics.median(times["--jobs 1"]), statistics.median(cpu["--jobs 1"])
    print("medians, and their ratios to --jobs 1:")
    for name in VARIANTS:
        wall, used = statistics.median(times[name]), statistics.median(cpu[name])
        print(f"  {name:<9} wall {wall:6.2f} s ({wall / serial:4.2f})  cpu {used:6.2f} s ({used / serial_cpu:4.2f})")
    if len({frozenset(c) for c in codes.values()}) > 1:  # the same models must give the same verdict
        print(f"exit codes differ between runs: {codes}")
        sys.exit(1)


if __name__ == "__main__":
    main()
