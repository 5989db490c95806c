"""Paths and the in-process runner shared by the CLI tests."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner, Result

from gradaudit.cli import main

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "sample_models"


def run(*args: str | Path, env: dict[str, str] | None = None) -> Result:
    return CliRunner(env=env).invoke(main, [str(a) for a in args], catch_exceptions=False)


def run_json(*args: str | Path) -> tuple[int, dict]:
    result = run(*args, "--static-only", "--format", "json")
    return result.exit_code, json.loads(result.stdout)


def findings(doc: dict) -> list[tuple[str, str | None]]:
    """(code, suppressed) of every finding of a single-model JSON report."""
    return [(f["code"], f.get("suppressed")) for f in doc["findings"]]
