"""Shared fixtures: the sample models built once per session into a temporary folder."""

from __future__ import annotations

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:  # sample_models/ is a folder of the repository, not of the package
    sys.path.insert(0, ROOT)


@pytest.fixture(scope="session")
def samples(tmp_path_factory) -> str:
    """Folder holding every sample model, freshly built by sample_models/build.py."""
    from sample_models.build import build_all

    out = tmp_path_factory.mktemp("samples")
    build_all(str(out))
    return str(out)


@pytest.fixture(scope="session")
def audited(samples):
    """audited(name, **AuditOptions fields) -> Report of the whole audit of that sample model (cached)."""
    from gradaudit.api import AuditOptions, audit_saved_model

    cache = {}

    def get(name: str, **options):
        key = (name, tuple(sorted(options.items())))
        if key not in cache:
            cache[key] = audit_saved_model(os.path.join(samples, name), AuditOptions(**options))
        return cache[key]

    return get


@pytest.fixture(scope="session")
def static_report(audited):
    """static_report(name) -> Report of the static pass only on that sample model (cached)."""
    return lambda name, **options: audited(name, static_only=True, **options)


# The runtime's tests: each builds a model and runs its numeric checks or probes (a second or more apiece).
RUNTIME_TESTS = ("numeric", "stability", "precision")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """The runtime's tests (tests/numeric, tests/stability, tests/precision) are in the slow tier with the tests that
    start processes, so that `pytest -m "not slow"` (the static pass, the rules, the reports, the CLI, the gate) is
    a quick loop; run `pytest tests/numeric` and the like for a change to the runtime, and CI runs everything. A
    browser test starts Chromium: it is in the slow tier too."""
    tests = os.path.join(ROOT, "tests")
    for item in items:
        runtime = os.path.relpath(str(item.path), tests).split(os.sep)[0] in RUNTIME_TESTS
        if (runtime or item.get_closest_marker("browser")) and not item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.slow)


def pytest_configure(config):
    """Python's `platform.processor()` starts `uname -p` once per process and caches it; TensorFlow's loader asks
    for it through h5py. Asked here, before any test, so that no quick-tier test is blamed for that one process."""
    import platform

    platform.processor()


@pytest.fixture(autouse=True)
def _processes_only_in_the_slow_tier(request, monkeypatch):
    """The quick tier (`-m "not slow"`) starts no process: a test that does (the confined child of a default
    audit, a `gradaudit` subprocess, a compiler, a browser) is marked `slow` or `browser`, or it fails here and
    says so. The run folder's reaper (a bare `python -I -S -c`, no import) is not counted."""
    marked = {m.name for m in request.node.iter_markers()}
    if marked & {"slow", "browser"}:
        yield
        return
    import subprocess

    started: list[str] = []
    real = subprocess.Popen.__init__

    def counting(self, args, *rest, **kwargs):
        argv = [args] if isinstance(args, str) else [str(a) for a in args]
        if argv[1:4] != ["-I", "-S", "-c"]:  # the run folder's reaper (interrupt.py): no import, a few ms
            started.append(" ".join(argv)[:120])
        return real(self, args, *rest, **kwargs)

    monkeypatch.setattr(subprocess.Popen, "__init__", counting)
    yield
    if started:
        pytest.fail(f"this test starts a process ({started[0]}): mark it @pytest.mark.slow", pytrace=False)
