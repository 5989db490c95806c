"""Data that crosses module boundaries: findings, sources, outputs, flow, numeric results, the Report."""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

# The statuses a report's rows take: Literals, so that mypy (strict_equality) refuses a comparison with a status
# that does not exist, and wire.decode refuses one the child did not have.
FlowStatus = Literal["connected", "blocked", "disconnected", "unknown"]
CheckStatus = Literal["pass", "fail", "inconclusive", "skipped", "error"]
# why a numeric check did not decide, where that says what would: no input could be built to run the model, two
# evaluations at the same point differ (real inputs do not help), or inputs made up here may be outside what the
# model accepts (real examples with --inputs decide)
UndecidedCause = Literal["no_input", "nondeterministic", "synthesised_inputs"]
ProbeStatus = Literal["ok", "nonfinite_gradient", "nonfinite_forward"]
TargetKind = Literal["saved_model", "python", "keras"]
# the stage that wrote a note (results.Stage), or "" in a JSON report read back that does not say
NoteStage = Literal["static", "numeric", "stability", "precision", ""]

# the `source` of a numeric check of the trainable variables together
ALL_VARIABLES = "*"
# the `source` of a numeric row that stands for every source at once: the checks did not run (skipped before any
# source was taken, or stopped on an error). The JSON report writes "*" for both; such a row has `every_source`
EVERY_SOURCE = "*"


class Severity(str, enum.Enum):
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"

    @property
    def rank(self) -> int:
        return {"info": 1, "warning": 2, "error": 3}[self.value]


@dataclass(frozen=True)
class OpRef:
    """Where an op lives: its type, its node name and the function (or `<graph>`) that holds it."""

    op_type: str
    op_name: str
    function: str

    @property
    def short(self) -> str:
        """`Type 'name'`: how findings and reports name an op."""
        return f"{self.op_type} '{self.op_name}'"

    @property
    def label(self) -> str:
        """`Type 'name' in function`: an op and where it is."""
        return f"{self.short} in {self.function}"


@dataclass(frozen=True)
class Finding:
    code: str
    rule: str
    severity: Severity
    message: str
    fix: str
    op: OpRef | None = None
    sources: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()
    # Set by configuration and baselines; a suppressed finding never fails a run.
    suppressed: str | None = None
    # A hazard lint the stability probes judged: where they saw it fail (`confirmed_by`), or where they
    # reached its op and saw nothing go wrong (`probed`); both None when no probe reached it. On a
    # gradient-mismatch, `confirmed_by` says that the cut on its pair was checked and does not explain it.
    confirmed_by: str | None = None
    probed: str | None = None
    # the end of `message` that advises where to look (a gradient-mismatch's custom gradients or ops), apart
    # from the measurement before it: what reconciliation drops when a static cut explains the difference
    advice: str | None = None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "code": self.code,
            "rule": self.rule,
            "severity": self.severity.value,
            "message": self.message,
            "op_type": self.op.op_type if self.op else None,
            "op_name": self.op.op_name if self.op else None,
            "function": self.op.function if self.op else None,
            "sources": list(self.sources),
            "outputs": list(self.outputs),
            "fix": self.fix,
        }
        if self.suppressed:
            d["suppressed"] = self.suppressed
        if self.confirmed_by:
            d["confirmed_by"] = self.confirmed_by
        if self.probed:
            d["probed"] = self.probed
        return d


@dataclass(frozen=True)
class Source:
    name: str
    kind: str  # "input" | "variable"
    dtype: str
    shape: tuple[int | None, ...] | None
    differentiable: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "dtype": self.dtype,
            "shape": None if self.shape is None else list(self.shape),
            "differentiable": self.differentiable,
        }


@dataclass(frozen=True)
class Output:
    name: str
    dtype: str
    shape: tuple[int | None, ...] | None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "dtype": self.dtype,
                "shape": None if self.shape is None else list(self.shape)}


@dataclass(frozen=True)
class Cut:
    op: OpRef
    rule: str
    # the op's value is piecewise constant where it cuts (its true derivative there is zero almost everywhere:
    # finite differences see the zero its gradient gives); None: not known, or not a question (stop_gradient)
    piecewise: bool | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"op_type": self.op.op_type, "op_name": self.op.op_name,
                "function": self.op.function, "rule": self.rule, "piecewise": self.piecewise}


@dataclass(frozen=True)
class FlowEntry:
    source: str
    output: str
    # "unknown": an op whose gradient cannot be known here lies on a float path of the pair (an op this
    # TensorFlow does not know, or a gradient replica that failed)
    status: FlowStatus
    blocked_by: tuple[Cut, ...] = ()
    unknown_by: tuple[OpRef, ...] = ()  # for "unknown": the ops that make it so
    # for "connected": cuts on some of the pair's paths while others carry the gradient (its gradient leaves
    # those paths out, so it differs from the derivative of the value on purpose or by mistake)
    partial_by: tuple[Cut, ...] = ()
    # "blocked" because TensorFlow raises when it builds the backward of the loaded function that holds one of
    # `blocked_by` (an op whose gradient raises or is missing): every pair of the signature, on its path or not
    raises: bool = False

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"source": self.source, "output": self.output, "status": self.status,
                             "blocked_by": [c.to_dict() for c in self.blocked_by]}
        if self.raises:
            d["raises"] = True
        if self.partial_by:
            d["partial_by"] = [c.to_dict() for c in self.partial_by]
        if self.status == "unknown":
            d["unknown_by"] = [{"op_type": r.op_type, "op_name": r.op_name, "function": r.function}
                               for r in self.unknown_by]
        return d


@dataclass(frozen=True)
class CheckedOutputs:
    """The outputs a numeric check projected together: `names`, in the check's order, or every float output of
    the model together (`every`, and no names). The JSON report writes it as one string (`label`): the name,
    the names joined by commas, or "*" for every output."""

    names: tuple[str, ...] = ()
    every: bool = False

    def __post_init__(self) -> None:
        if self.every and self.names:
            raise ValueError("checked outputs: every output, or some named: not both")
        if not self.every and not self.names:
            raise ValueError("checked outputs: no output named")
        if any(not isinstance(n, str) or not n for n in self.names):
            raise ValueError("checked outputs: an output name that is not a nonempty string")

    @classmethod
    def of(cls, outputs: Sequence[str], float_outputs: Sequence[str]) -> CheckedOutputs:
        """The outputs of a check that projected `outputs` of the model's `float_outputs`: one output by its
        name (also when it is the only one), every float output when it projected all of several."""
        if len(outputs) != 1 and set(outputs) == set(float_outputs):
            return EVERY_OUTPUT
        return cls(tuple(outputs))

    @classmethod
    def from_label(cls, label: str) -> CheckedOutputs:
        """The value a JSON report's `output` string stands for (`label` read back)."""
        return EVERY_OUTPUT if label == "*" else cls(tuple(label.split(",")))

    @property
    def label(self) -> str:
        """The JSON report's `output`: "*" for every float output, else the names joined by commas."""
        return "*" if self.every else ",".join(self.names)

    def renamed(self, names: Mapping[str, str]) -> CheckedOutputs:
        """The same outputs under other names (each name in `names` mapped, the others kept)."""
        return self if self.every else CheckedOutputs(tuple(names.get(n, n) for n in self.names))


# the outputs of a check of every float output together
EVERY_OUTPUT = CheckedOutputs(every=True)


@dataclass(frozen=True)
class NumericResult:
    source: str
    # the outputs the check projected together (the JSON report's `output`: their label)
    outputs: CheckedOutputs
    status: CheckStatus
    rel_error: float | None
    step: float | None
    dtype: str | None
    evaluations: int
    reason: str | None = None
    # why the check ran in `dtype`: the float64 copy, or why it could not be used
    precision_reason: str | None = None
    # the stability probe scale (signed) of the point checked; None: the synthesised (or --inputs) point
    scale: float | None = None
    # a `fail` that a cut found by the static pass explains (the gradient leaves that path out by design):
    # the cut op's label; such a mismatch is expected, not a finding against the model
    expected_by: str | None = None
    # the relative discrepancy rounding, truncation and the floor explain: above it, the check fails
    bound: float | None = None
    # 1: the gradient against differences of the forward; 2: Hessian-vector products against differences
    # of the gradient (--order 2)
    order: int = 1
    # what a difference from finite differences was judged on, when one was seen along some line: the kink
    # (an op that has one on the path, and differences that change slope across it) that explains it, or why
    # nothing does; None when no difference beyond the bound was seen
    evidence: str | None = None
    # the op with a kink on the path between the source and the output that the evidence names ("Relu 'r'")
    kink_op: str | None = None
    # a row for every source at once (`source` EVERY_SOURCE), never the variables' combined check (ALL_VARIABLES)
    every_source: bool = False
    # at the inputs given with --inputs, the difference quotients did not settle (the forward may jump: no
    # derivative there): the point asked about is undecided, whatever the checks at other points say
    unsettled: bool = False
    # why the check did not decide, as a fact (the reason says it in words); None: not one of these
    cause: UndecidedCause | None = None

    def to_dict(self) -> dict[str, Any]:
        d = {"source": self.source, "output": self.outputs.label, "status": self.status,
             "rel_error": self.rel_error, "step": self.step, "dtype": self.dtype,
             "evaluations": self.evaluations, "reason": self.reason,
             "precision_reason": self.precision_reason, "scale": self.scale, "bound": self.bound,
             "order": self.order}
        if self.expected_by:
            d["expected_by"] = self.expected_by
        if self.evidence:
            d["evidence"] = self.evidence
        if self.kink_op:
            d["kink_op"] = self.kink_op
        if self.every_source:
            d["every_source"] = True
        if self.unsettled:
            d["unsettled"] = True
        if self.cause:
            d["cause"] = self.cause
        return d

    def __post_init__(self) -> None:
        if not isinstance(self.outputs, CheckedOutputs):  # a string label where the value belongs
            raise TypeError(f"NumericResult.outputs: expected CheckedOutputs, got {type(self.outputs).__name__}")
        if self.every_source and self.source != EVERY_SOURCE:
            raise ValueError(f"NumericResult: a row for every source has source {EVERY_SOURCE!r}, not {self.source!r}")


@dataclass(frozen=True)
class StabilityResult:
    source: str
    output: str
    scale: float
    status: ProbeStatus
    op_type: str | None = None
    op_name: str | None = None
    detail: str | None = None
    # a non-finite cell held against the model; False for what the float64 copy explains (outside the
    # function's domain, or a true value beyond the dtype's range). None: any non-finite cell is.
    reported: bool | None = None

    @property
    def held(self) -> bool:
        return self.status != "ok" and self.reported is not False

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "output": self.output, "scale": self.scale,
                "status": self.status, "op_type": self.op_type, "op_name": self.op_name,
                "detail": self.detail, "reported": self.held}


LocalStatus = Literal["pass", "fail", "undecided"]


@dataclass(frozen=True)
class LocalCheck:
    """One op's gradient checked on its own at the values the model's forward gave it (numeric/local.py):
    `kind` "op" (TensorFlow's registered gradient) or "custom_gradient" (one the model's author wrote, checked as
    the region it replaces); `dtype` the precision it ran in; `shared` how many instances of the same type,
    attributes and input shapes this check stands for (ops linear in their inputs: their gradient is a formula of
    shapes, not values); `scale` the stability probe scale of the point (None: the synthesised or --inputs point);
    `evidence` what decided a pass at a kink, or why the check failed or is undecided."""

    op: OpRef
    kind: Literal["op", "custom_gradient"]
    status: LocalStatus
    dtype: str
    rel_error: float | None
    bound: float | None
    evaluations: int
    evidence: str | None = None
    shared: int = 1
    scale: float | None = None
    # a custom gradient that failed with its inputs moved together: those (by position in the op's inputs) whose
    # own check, moved one at a time, fails too; () when not measured (one input) or none fails alone
    failing_inputs: tuple[int, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"op_type": self.op.op_type, "op_name": self.op.op_name, "function": self.op.function,
                "kind": self.kind, "status": self.status, "dtype": self.dtype, "rel_error": self.rel_error,
                "bound": self.bound, "evaluations": self.evaluations, "evidence": self.evidence,
                "shared": self.shared, "scale": self.scale, "failing_inputs": list(self.failing_inputs)}


@dataclass(frozen=True)
class PrecisionResult:
    """What casting to a lower precision (`--precision`) does to one source's gradient (`kind` "gradient") or
    one op's output (`kind` "activation") at one point: fractions of its nonzero finite entries."""

    kind: str  # "gradient" | "activation"
    name: str  # the source; for an activation, the op as `Type 'name'`
    dtype: str  # the target precision: "float16" | "bfloat16"
    scale: float | None  # the stability probe scale of the point; None: the synthesised (or --inputs) point
    # nonzero finite entries in the model's own precision (a model computing in `dtype` already: of its float64
    # copy's gradient, less those its own rounds to zero, see zero_rescued)
    entries: int
    underflow: float  # fraction zero after the cast (below about half the smallest subnormal)
    subnormal: float  # fraction subnormal after the cast (precision lost)
    overflow: float  # fraction inf after the cast (above the largest finite value)
    largest: float | None = None  # largest magnitude among the entries
    smallest: float | None = None  # smallest nonzero magnitude
    # gradients: the power of two a dynamic loss scaler settles on at this point (every source together); the
    # fraction of this source's entries still zero at that scale, and at the best scale for this source alone
    # (entries over the dtype's dynamic range below its own largest: lost at any scale, and negligible beside
    # it); whether the one scale keeps every source's entries that its own scale would keep (all but under 1%)
    loss_scale: float | None = None
    underflow_scaled: float | None = None
    one_scale: bool | None = None
    underflow_own: float | None = None
    op: OpRef | None = None  # activations: the op
    # gradients of a model that computes in `dtype` already (mixed precision): the entries counted are those of
    # its float64 copy's gradient (`reference` "float64 copy"), whose zeros are exact; `zero_inside`, the fraction
    # of them that are exactly zero in the model's own gradient; `zero_rescued`, the fraction zero there that its
    # own gradient at the loss scale (the cotangent times `rescue_scale`, a power of two) makes finite and nonzero:
    # they underflowed inside it. A power-of-two scale changes nothing but under- and overflow, so a zero it does
    # not rescue is the dtype's rounding (a cancellation, a saturated tanh), not an underflow. None: not measured
    reference: str | None = None
    zero_inside: float | None = None
    zero_rescued: float | None = None
    rescue_scale: float | None = None
    subnormal_scaled: float | None = None  # gradients: the fraction subnormal at `loss_scale` (in range, bits lost)
    # gradients: the fraction of all entries inf or NaN already in the model's own precision (not counted above:
    # the stability probes report them)
    nonfinite: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "dtype": self.dtype, "scale": self.scale,
                "entries": self.entries, "underflow": self.underflow, "subnormal": self.subnormal,
                "overflow": self.overflow, "largest": self.largest, "smallest": self.smallest,
                "loss_scale": self.loss_scale, "underflow_scaled": self.underflow_scaled,
                "subnormal_scaled": self.subnormal_scaled, "nonfinite": self.nonfinite,
                "one_scale": self.one_scale, "underflow_own": self.underflow_own,
                "op_type": self.op.op_type if self.op else None, "op_name": self.op.op_name if self.op else None,
                "function": self.op.function if self.op else None, "reference": self.reference,
                "zero_inside": self.zero_inside, "zero_rescued": self.zero_rescued, "rescue_scale": self.rescue_scale}


@dataclass(frozen=True)
class PathStep:
    """One op on a blocked pair's path; `skipped` ops of a long path are left out just before it."""

    op_type: str
    op_name: str
    function: str
    skipped: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"op_type": self.op_type, "op_name": self.op_name, "function": self.function,
                "skipped": self.skipped}


@dataclass(frozen=True)
class BlockedPath:
    """Where a blocked pair's gradient dies: source -> steps -> output, `steps[cut]` being the cutting op."""

    source: str
    output: str
    steps: tuple[PathStep, ...]
    cut: int

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "output": self.output, "steps": [s.to_dict() for s in self.steps],
                "cut": self.cut}


@dataclass(frozen=True)
class Isolation:
    """What confined and bounded the process that ran the model (isolate.py, safety/sandbox.py); None in a
    field: the platform (or the options) gave none of it."""

    filesystem: str | None  # "landlock-abi7": reads only the model and the Python environment, writes its own folder
    network: str | None  # "landlock+netns" (no TCP, no interface but loopback), "landlock" (no TCP), "netns"
    memory_limit_bytes: int | None
    time_budget_s: float | None
    missing: tuple[str, ...] = ()  # what was not in force and why, one phrase each
    file_size_limit_bytes: int | None = None  # the largest file the process may write (RLIMIT_FSIZE)

    def to_dict(self) -> dict[str, Any]:
        return {"filesystem": self.filesystem, "network": self.network,
                "memory_limit_bytes": self.memory_limit_bytes, "time_budget_s": self.time_budget_s,
                "missing": list(self.missing), "file_size_limit_bytes": self.file_size_limit_bytes}


@dataclass(frozen=True)
class Target:
    path: str
    kind: TargetKind
    signature: str | None
    tags: tuple[str, ...] = ()


@dataclass(frozen=True)
class AuditFailure:
    """A model that could not be audited: a load, usage or internal error (exit code 2)."""

    path: str
    error: str


@dataclass(frozen=True)
class Note:
    """What a stage could not check, and why: one line, with the stage that wrote it ("static", "numeric",
    "stability", "precision"; "" in a JSON report read back that does not say)."""

    stage: NoteStage
    text: str


@dataclass(frozen=True)
class Report:
    """One audit's result, built once from its stages' results (api.py) and not changed after: a policy
    (suppressions, --fail-on) makes a new one with dataclasses.replace."""

    target: Target
    sources: list[Source] = field(default_factory=list)
    outputs: list[Output] = field(default_factory=list)
    flow: list[FlowEntry] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    numeric: list[NumericResult] = field(default_factory=list)
    stability: list[StabilityResult] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)  # what could not be checked, and why, by the stage that says so
    seed: int | None = None
    paths: list[BlockedPath] = field(default_factory=list)  # one per blocked pair and cutting op (paths.py)
    # requested checks that did not run (or not to the end), one line each with the reason: the run can
    # vouch for nothing they would have found, so the verdict is "incomplete", never "pass"
    incomplete: list[str] = field(default_factory=list)
    fail_on: str = "error"  # the threshold this report's verdict uses when none is given (the API's policy)
    isolation: Isolation | None = None  # how the part that ran the model was confined; None: nothing ran
    # --precision: how the gradients and activations fare in float16 or bfloat16 (empty without it)
    precision: list[PrecisionResult] = field(default_factory=list)
    # the local checks (one op at a time, at its recorded values) that decided the numeric checks of a large model
    local: list[LocalCheck] = field(default_factory=list)
    # the part that runs the model brought no result (--timeout, --memory-limit, the process died or sent no
    # valid result): the report tells of the machine and the moment, not only of the model (--cache keeps none)
    runtime_stopped: bool = False

    def notes_of(self, stage: str) -> list[str]:
        """The text of each note `stage` wrote, in order."""
        return [n.text for n in self.notes if n.stage == stage]

    @property
    def note_texts(self) -> list[str]:
        """Every note's text, in order (the JSON report's `notes`; their stages are its `note_stages`)."""
        return [n.text for n in self.notes]

    def summary(self) -> dict[str, int]:
        counts = {s.value: 0 for s in Severity}
        for f in self.findings:
            if not f.suppressed:
                counts[f.severity.value] += 1
        return {"error": counts["error"], "warning": counts["warning"], "info": counts["info"]}

    def worst(self) -> Severity | None:
        active = [f.severity for f in self.findings if not f.suppressed]
        return max(active, key=lambda s: s.rank) if active else None

    def fails(self, fail_on: str | None = None) -> bool:
        """True when an active finding is at or above `fail_on` (error, warning, info, never)."""
        fail_on = fail_on or self.fail_on
        if fail_on == "never":
            return False
        threshold = Severity(fail_on).rank
        return any(f.severity.rank >= threshold for f in self.findings if not f.suppressed)

    @property
    def ok(self) -> bool:
        return self.verdict() == "pass"

    @property
    def unknown_pairs(self) -> list[FlowEntry]:
        return [e for e in self.flow if e.status == "unknown"]

    def verdict(self, fail_on: str | None = None) -> str:
        """`fail` (a finding at or above `fail_on`), `incomplete` (a requested check did not run, or a pair's
        gradient cannot be known here), else `pass`."""
        if self.fails(fail_on):
            return "fail"
        if self.incomplete or self.unknown_pairs:
            return "incomplete"
        return "pass"

    def gate_fails(self, fail_on: str | None = None) -> bool:
        """Whether this report makes the run exit 1: a failure, or an incomplete audit (unless `never`)."""
        return (fail_on or self.fail_on) != "never" and self.verdict(fail_on) != "pass"



def combined_verdict(reports: Iterable[Report], fail_on: str = "error", failed: bool = False) -> str:
    """One verdict for several reports: `fail` when any fails (or a model could not be audited), else
    `incomplete` when any is, else `pass`."""
    verdicts = {r.verdict(fail_on) for r in reports}
    if failed or "fail" in verdicts:
        return "fail"
    return "incomplete" if "incomplete" in verdicts else "pass"
