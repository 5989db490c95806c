"""CI that scales out: `--shard K/N` audits a deterministic K-th of N parts of the models found, the same
part on every machine, and `gradaudit merge` puts the shards' JSON reports back into one run."""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Sequence

from .errors import GradauditError
from .model import Report
from .report.json_load import ReportFile

_SHARD = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")


def parse(text: str) -> tuple[int, int]:
    """`K/N` with 1 <= K <= N; ValueError otherwise."""
    m = _SHARD.match(text)
    if not m or not 1 <= int(m.group(1)) <= int(m.group(2)):
        raise ValueError(f"{text!r}: expected K/N with 1 <= K <= N, e.g. 2/4")
    return int(m.group(1)), int(m.group(2))


def shard_key(model: str, arguments: Sequence[str]) -> str:
    """What decides a model's shard: its path relative to the folder argument it was found under
    (`zoo/vision/resnet` found in `zoo` is `vision/resnet`), else the path as given; POSIX separators, so
    that a checkout in another folder or on another OS puts it in the same shard."""
    path = os.path.normpath(model)
    for arg in arguments:
        root = os.path.normpath(arg)
        if path != root and path.startswith(root.rstrip(os.sep) + os.sep):
            return os.path.relpath(path, root).replace(os.sep, "/")
    return path.replace(os.sep, "/")


def shard_of(key: str, count: int) -> int:
    """1-based shard of a key: a hash, so adding a model never moves the others."""
    return int.from_bytes(hashlib.sha256(key.encode("utf-8")).digest()[:8], "big") % count + 1


def select(models: Sequence[str], arguments: Sequence[str], shard: tuple[int, int]) -> list[str]:
    k, n = shard
    return [m for m in models if shard_of(shard_key(m, arguments), n) == k]


def _order(path: str) -> list[str]:
    """Sort key: path components, the order the recursive search walks folders in."""
    return [p for p in re.split(r"[\\/]+", path) if p]


def merge(files: Sequence[ReportFile]) -> tuple[list[Report], list[tuple[str, str]]]:
    """Every shard's reports and not-audited models, in the order an unsharded recursive run lists them.
    A model in two shards means the shards were not cut from one run: an error, not a double count."""
    seen: dict[tuple[str, str | None], str] = {}
    reports: list[Report] = []
    errors: list[tuple[str, str]] = []
    for f in files:
        for r in f.reports:
            key = (r.target.path, r.target.signature)
            if key in seen:
                raise GradauditError(f"{r.target.path} is in {seen[key]} and in {f.path}: merge the shards of one "
                                     "run (the same models and --shard N)")
            seen[key] = f.path
            reports.append(r)
        errors.extend(f.errors)
    reports.sort(key=lambda r: _order(r.target.path))  # stable: a model's signatures keep their order
    errors.sort(key=lambda e: _order(e[0]))
    return reports, errors
