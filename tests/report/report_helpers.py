"""Paths and small helpers shared by the reporter tests."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from gradaudit.model import Report

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "sample_models"


def suppressed(report: Report, reason: str = "baseline") -> Report:
    return dataclasses.replace(report, findings=[dataclasses.replace(f, suppressed=reason) for f in report.findings])
