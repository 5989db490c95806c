"""Speed of `--jobs`, measured in one run (never asserted in tests).

`gradaudit M1 M2 M3 M4` on four small sample models (sample_models/, committed SavedModels), as whole
processes: `--jobs 1`, `--jobs 2` and the default, run in turn (a round of the three, `--repeat` rounds, so
that load from elsewhere on the machine falls on all three alike). Prints each run's wall time, the medians,
and the ratios to `--jobs 1`. Target: `--jobs 2` no slower than `--jobs 1` for small models; the default
never slower than serial.

Usage: python bench/bench_jobs.py [--repeat N] [--models NAME ...]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMALL = ("mlp", "cnn", "softplus", "ratio_stable")
VARIANTS = {"--jobs 1": ["--jobs", "1"], "--jobs 2": ["--jobs", "2"], "default": []}


def wall_time(args: list[str]) -> tuple[float, int]:
    t = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "gradaudit", *args], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - t, done.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="rounds of the three runs (default 3)")
    parser.add_argument("--models", nargs="+", default=list(SMALL), metavar="NAME",
                        help="sample models under sample_models/ (default: %(default)s)")
    args = parser.parse_args()
    models = [os.path.join(ROOT, "sample_models", m) for m in args.models]
    times: dict[str, list[float]] = {name: [] for name in VARIANTS}
    codes: dict[str, set[int]] = {name: set() for name in VARIANTS}
    print(f"{len(models)} models: {', '.join(args.models)}; {os.cpu_count()} cores; {args.repeat} round(s)")
    for round_ in range(args.repeat):
        for name, extra in VARIANTS.items():
            seconds, code = wall_time([*models, *extra])
            times[name].append(seconds)
            codes[name].add(code)
            print(f"  round {round_ + 1}: {name:<9} {seconds:6.2f} s (exit {code})", flush=True)
    serial = statistics.median(times["--jobs 1"])
    print("median wall time, and ratio to --jobs 1:")
    for name in VARIANTS:
        median = statistics.median(times[name])
        print(f"  {name:<9} {median:6.2f} s  {median / serial:5.2f}")
    if len({frozenset(c) for c in codes.values()}) > 1:  # the same models must give the same verdict
        print(f"exit codes differ between runs: {codes}")
        sys.exit(1)


if __name__ == "__main__":
    main()
