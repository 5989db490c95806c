"""CLI tests run in an empty working folder (no pyproject.toml above it decides their options) with the
environment variables that change the output removed."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from .cli_helpers import SAMPLES


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    for name in ("NO_COLOR", "FORCE_COLOR", "COLUMNS", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        monkeypatch.delenv(name, raising=False)
    return work


@pytest.fixture(scope="module")
def argmax() -> Path:
    """One error (GA103 zero-gradient on ArgMax, cutting x, dense/bias, dense/kernel -> cls)."""
    return SAMPLES / "classifier_argmax"


@pytest.fixture(scope="module")
def stop() -> Path:
    """One info (GA106 stop-gradient: a straight-through estimator, every pair connected)."""
    return SAMPLES / "ste"


@pytest.fixture(scope="module")
def disconnected() -> Path:
    """One warning (GA108 disconnected-source)."""
    return SAMPLES / "disconnected_variable"


@pytest.fixture(scope="module")
def mlp() -> Path:
    """No findings."""
    return SAMPLES / "mlp"


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    """A folder of models for --recursive: two nested SavedModels, one inside a hidden folder, and noise."""
    root = tmp_path_factory.mktemp("tree")
    shutil.copytree(SAMPLES / "classifier_argmax", root / "models" / "clf")
    shutil.copytree(SAMPLES / "mlp", root / "models" / "deep" / "mlp")
    shutil.copytree(SAMPLES / "stop_gradient", root / ".venv" / "stop")
    (root / "models" / "README.md").write_text("not a model")
    return root
