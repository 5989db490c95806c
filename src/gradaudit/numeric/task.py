"""What the numeric checks are asked and what they return: the options, the task the static pass's result
makes, the local checks' verdict and the outcome (plain values, below every stage of the package)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ..model import Finding, FlowEntry, NumericResult, Output, Source


@dataclass(frozen=True)
class NumericOptions:
    seed: int = 0
    batch_size: int = 2
    dim: int = 4  # for unknown non-batch dimensions
    shapes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)  # --shape NAME=D0,D1
    inputs_file: str | None = None  # --inputs FILE.npz, arrays by signature input key
    upcast: bool = True  # try float64 evaluation


@dataclass
class NumericOutcome:
    results: list[NumericResult]
    findings: list[Finding]
    notes: list[str]  # what could not be checked and why, shown in the report
    stopped: str | None = None  # TensorFlow's reason when the model could not be loaded, run or differentiated
    raised: str | None = None  # that reason when it was differentiating the loaded model that raised


@dataclass(frozen=True)
class LocalVerdict:
    """What the local checks (numeric/local.py: each op on its own at the values the model's forward gave it)
    decided for the whole model: "pass" (every differentiable op passed: the model's gradient is TensorFlow's chain
    rule over them) or "fail" (an op's gradient is wrong: the local finding names it); the evidence, the precision
    and the effort behind it. The whole-model checks do not run then."""

    status: Literal["pass", "fail"]
    evidence: str
    dtype: str
    evaluations: int
    rel_error: float | None = None
    # a failure: the sources whose gradient it concerns (the rest are decided pass); None: every source
    sources: tuple[str, ...] | None = None


@dataclass(frozen=True)
class NumericTask:
    """What the numeric checks are asked, from the static pass's result: its sources, outputs and flow (which
    pairs are connected, cut or raise), its StaticAnalysis (`analysis`: what values the inputs are made for,
    token ids, label distributions; None: generic inputs), the options, and `progress`, told each step."""

    sources: list[Source]
    outputs: list[Output]
    flow: list[FlowEntry]
    options: NumericOptions = field(default_factory=NumericOptions)
    analysis: Any = None
    progress: Callable[[str], None] | None = None
    local: LocalVerdict | None = None  # decided by the local checks: no whole-model check runs
    # a traced function checked in its own precision: why its saved copy has no float64 copy ("": not said)
    float64_blocked: str = ""

    def say(self, message: str) -> None:
        if self.progress is not None:
            self.progress(message)
