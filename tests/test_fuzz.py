"""Mutated saved_model.pb files (bit flips, truncation, spliced fields): gradaudit reports or exits 2
with one line, never crashes or hangs."""

from __future__ import annotations

import os
import shutil

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gradaudit.api import AuditOptions, audit_saved_model
from gradaudit.errors import GradauditError

BASES = ["classifier_argmax", "while_loop", "case", "log1pexp_custom"]


@pytest.fixture(scope="module")
def originals(samples):
    out = {}
    for name in BASES:
        with open(os.path.join(samples, name, "saved_model.pb"), "rb") as f:
            out[name] = f.read()
    return out


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, samples):
    path = tmp_path_factory.mktemp("fuzz") / "model"
    shutil.copytree(os.path.join(samples, "classifier_argmax"), path)
    return path


def mutate(data: bytes, kind: str, a: int, b: int, flips: list[int]) -> bytes:
    n = len(data)
    if kind == "truncate":
        return data[: a % n]
    if kind == "flip":
        buf = bytearray(data)
        for f in flips:
            buf[f % n] ^= 1 << (f % 8)
        return bytes(buf)
    if kind == "splice":  # copy a run of bytes from one place to another (duplicated / shifted fields)
        i, j = sorted((a % n, b % n))
        k = (a * 7 + b) % n
        return data[:k] + data[i:j] + data[k:]
    # drop a run of bytes
    i, j = sorted((a % n, b % n))
    return data[:i] + data[j:]


@settings(max_examples=int(os.environ.get("GRADAUDIT_FUZZ_EXAMPLES", "80")), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(base=st.sampled_from(BASES), kind=st.sampled_from(["truncate", "flip", "splice", "drop"]),
       a=st.integers(0, 2**31), b=st.integers(0, 2**31), flips=st.lists(st.integers(0, 2**31), max_size=8))
def test_mutated_model_reports_or_exits_2(originals, workdir, base, kind, a, b, flips):
    with open(workdir / "saved_model.pb", "wb") as f:
        f.write(mutate(originals[base], kind, a, b, flips))
    try:
        report = audit_saved_model(str(workdir), AuditOptions(static_only=True))
    except GradauditError as exc:
        assert str(exc) and "\n" not in str(exc)
    else:
        assert report.target.kind == "saved_model"
