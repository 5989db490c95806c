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
