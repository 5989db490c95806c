"""GA2xx: rules whose findings come from running the model (numeric gradient checks)."""

from __future__ import annotations

from .base import Rule

RULES: tuple[Rule, ...] = ()
