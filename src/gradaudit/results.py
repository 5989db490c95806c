"""The values an audit's stages hand each other (api.py runs them in this order):

    target -> StaticResult (static pass) -> Gate (may the model run?) -> RuntimeResult (runtime stages)
           -> reconcile.reconcile(static, gate, runtime) -> Report

Each stage is a function of the values before it and returns a new one; nothing is written into a shared
draft. The runtime's values cross from the confined child to gradaudit as data (wire.py), so every field
here that the child sends is a type wire.decode checks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from .model import (
    BlockedPath,
    Finding,
    FlowEntry,
    Isolation,
    LocalCheck,
    Note,
    NumericResult,
    OpRef,
    Output,
    PrecisionResult,
    Source,
    StabilityResult,
    Target,
)

Stage = Literal["static", "numeric", "stability", "precision"]


def _notes_of(part: Any, stage: Stage) -> None:
    """A runtime part's notes are its own stage's (the wire refuses a part that says otherwise)."""
    wrong = next((n for n in part.notes if not isinstance(n, Note) or n.stage != stage), None)
    if wrong is not None:
        raise ValueError(f"{type(part).__name__}: a note that is not the {stage} stage's: {wrong!r:.80}")


@dataclass(frozen=True)
class AuditOptions:
    """What the user asked of one audit (the CLI's options and the API's keyword arguments)."""

    tags: tuple[str, ...] = ("serve",)
    signature: str = "serving_default"
    static_only: bool = False
    seed: int = 0
    batch_size: int = 2
    dim: int = 4
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    inputs_file: str | None = None
    input_specs: tuple[str, ...] = ()  # NAME=DTYPE[D0,...] for a tf.function without input_signature
    allow_unsafe_ops: bool = False
    order: int = 1  # 2: also check second derivatives (Hessian-vector products)
    probe_scales: tuple[float, ...] | None = None  # stability probe ladder; None: the default one
    # seconds for the model-running part, run in a confined child process (isolate.py); None or 0: in this
    # process, without time budget, memory limit or sandbox
    timeout: float | None = None
    memory_limit: int | None = None  # bytes of data for that child; None: half the physical memory; 0: no limit
    # Python packages to import or shared libraries to load (tf.load_op_library) before the audit, so that
    # their custom ops and gradients are known
    load_ops: tuple[str, ...] = ()
    precision: str | None = None  # float16 or bfloat16: how the gradients and activations fare in it; None: not
    # whether the local checks (each op at its recorded values) decide the numeric checks: "auto" for a model of
    # stability.local.LARGE_MODEL trainable parameters or more, "always", or "never" (the whole-model checks)
    local_checks: Literal["auto", "always", "never"] = "auto"


@dataclass(frozen=True)
class StaticResult:
    """The static pass: the graph's sources, outputs and flow, the static findings and where blocked paths
    die. `analysis` (flow.StaticAnalysis) and `model` (the parse, targets.AuditTarget) are what the runtime
    reads the graph from; they go to the child as the trusted parent's job, never back."""

    target: Target
    sources: tuple[Source, ...]
    outputs: tuple[Output, ...]
    flow: tuple[FlowEntry, ...]
    findings: tuple[Finding, ...]
    paths: tuple[BlockedPath, ...]
    notes: tuple[Note, ...]
    analysis: Any = None
    model: Any = None


@dataclass(frozen=True)
class Gate:
    """Whether the runtime stages run, and if not, why: one line per reason, each a reason the audit is
    incomplete (`reasons` is empty when they run or were not requested, as with --static-only)."""

    run: bool
    reasons: tuple[str, ...] = ()
    seed: int | None = None  # the seed of the synthesised inputs, when the runtime runs
    inputs_given: bool = False  # --inputs gave the checked point: no hint to give it


@dataclass(frozen=True)
class HazardVerdict:
    """What the stability probes saw of one static hazard lint, by the finding's identity (code, op, sources,
    outputs): where they saw it fail (`confirmed_by`), where they reached its op and saw nothing go wrong
    (`probed`), or why they could not reach it (`unreached`)."""

    code: str
    op: OpRef | None
    sources: tuple[str, ...]
    outputs: tuple[str, ...]
    confirmed_by: str | None = None
    probed: str | None = None
    # the probes ran but could not reach it (its op reads nothing they scale): why; it keeps its severity
    unreached: str | None = None

    @staticmethod
    def key_of(finding: Finding) -> tuple[str, OpRef | None, tuple[str, ...], tuple[str, ...]]:
        return finding.code, finding.op, finding.sources, finding.outputs

    @property
    def key(self) -> tuple[str, OpRef | None, tuple[str, ...], tuple[str, ...]]:
        return self.code, self.op, self.sources, self.outputs


@dataclass(frozen=True)
class NumericPart:
    """The numeric checks at the synthesised (or --inputs) point."""

    results: tuple[NumericResult, ...] = ()
    findings: tuple[Finding, ...] = ()
    notes: tuple[Note, ...] = ()  # each the numeric stage's
    local: tuple[LocalCheck, ...] = ()  # the local checks that decided them (a large model), or ran before them
    # TensorFlow's reason when differentiating the loaded model raised at the checks' point (GA204 says it)
    raised: str | None = None

    def __post_init__(self) -> None:
        _notes_of(self, "numeric")


@dataclass(frozen=True)
class RaisedAt:
    """The probe points where TensorFlow raised, for one reason, when it differentiated the model there, and the
    finding that says so (reconcile adds it unless the numeric checks already found that reason at their point)."""

    reason: str  # TensorFlow's reason (numeric.runner.describe), as the numeric checks say theirs
    points: tuple[str, ...]
    finding: Finding


@dataclass(frozen=True)
class ProbePart:
    """The stability probes over the input ladder, their checks at probe points and the second order."""

    results: tuple[StabilityResult, ...] = ()
    numeric: tuple[NumericResult, ...] = ()
    findings: tuple[Finding, ...] = ()
    verdicts: tuple[HazardVerdict, ...] = ()
    notes: tuple[Note, ...] = ()  # each the stability stage's
    stopped: str | None = None  # TensorFlow's reason when running the model stopped the probes
    incomplete: tuple[str, ...] = ()
    local: tuple[LocalCheck, ...] = ()  # the local checks at probe points (a large model's, instead of whole-model)
    raised: tuple[RaisedAt, ...] = ()  # points where differentiating the model raised, by reason

    def __post_init__(self) -> None:
        _notes_of(self, "stability")


@dataclass(frozen=True)
class PrecisionPart:
    """--precision: the gradients and activations in float16 or bfloat16."""

    results: tuple[PrecisionResult, ...] = ()
    findings: tuple[Finding, ...] = ()
    notes: tuple[Note, ...] = ()  # each the precision stage's
    incomplete: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _notes_of(self, "precision")


@dataclass(frozen=True)
class StageFailure:
    """gradaudit's own failure in a runtime stage (its bug, never the model's): the stage and the exception
    in one line. The stages before it kept their results."""

    stage: str
    detail: str


@dataclass(frozen=True)
class RuntimeResult:
    """What running the model measured, stage by stage (None: the stage did not run), how the process that
    ran it was confined, and why it stopped early when it did (`stopped`: one incomplete line)."""

    numeric: NumericPart | None = None
    probes: ProbePart | None = None
    precision: PrecisionPart | None = None
    isolation: Isolation | None = None
    stopped: str | None = None
    failure: StageFailure | None = None
