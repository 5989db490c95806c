"""Reporters: each turns a finished Report into text. The name -> reporter map feeds the CLI."""

from __future__ import annotations

from typing import Callable

from ..model import Report
from . import json_report, terminal

Reporter = Callable[[Report], str]

REPORTERS: dict[str, Reporter] = {
    "text": terminal.render_plain,
    "json": json_report.render,
}
