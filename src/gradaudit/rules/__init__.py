"""The one registry of rules. A new rule goes in its family module and that module's RULES tuple."""

from __future__ import annotations

from . import flow as _flow
from . import hazards as _hazards
from . import numeric as _numeric
from . import safety as _safety
from .base import DOC_SECTIONS, Rule

ALL_RULES: tuple[Rule, ...] = (*_flow.RULES, *_numeric.RULES, *_hazards.RULES, *_safety.RULES)

_BY_KEY = {r.code.lower(): r for r in ALL_RULES} | {r.slug: r for r in ALL_RULES}


def get_rule(code_or_slug: str) -> Rule:
    """Rule by code (`GA101`) or slug (`zero-gradient`); KeyError when unknown."""
    return _BY_KEY[code_or_slug.strip().lower()]


__all__ = ["ALL_RULES", "DOC_SECTIONS", "Rule", "get_rule"]
