"""The static checks: each reads a finished StaticAnalysis and returns findings (detection lives here; the
rule catalog in gradaudit.rules is plain data)."""

from __future__ import annotations

from . import flow_rules as _flow
from . import hazards as _hazards
from . import safety_rules as _safety

# One registry, run in this order by the static pass.
STATIC_CHECKS = (_flow.check, _safety.check, _hazards.check)

__all__ = ["STATIC_CHECKS"]
