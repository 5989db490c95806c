"""The audit command's options, declared once: cli.py reads them from the command line, config.py from a
configuration file (keys are the option names), and the Python API's `config=` from the same file. An
option's parameter name is the AuditOptions field or the policy argument it sets."""

from __future__ import annotations

import os
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import click

from .config import ConfigError, default_map, option_key, read
from .report import FORMATS

FAIL_ON = ("error", "warning", "info", "never")
PATH = click.Path(dir_okay=False)
class _FiniteSeconds(click.FloatRange):
    """A number of seconds, 0 or more and finite: `nan` or `inf` (from the command line or a configuration file)
    would stop every audit at once or write `Infinity` into the JSON report."""

    name = "seconds"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        import math

        seconds = super().convert(value, param, ctx)
        if not math.isfinite(seconds):
            self.fail(f"{value!r} is not a finite number of seconds", param, ctx)
        return seconds


_SECONDS = _FiniteSeconds(min=0)

# The CLI's time budget for the part that runs the model (--timeout); the Python API runs it in the caller's
# process unless given a timeout.
DEFAULT_TIMEOUT = 600.0

F = TypeVar("F", bound=Callable[..., Any])


def _rules(_ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]) -> tuple[str, ...] | None:
    """Rule codes, prefixes or slugs, checked here and parsed where the policy is built."""
    from .suppress import UnknownRule, parse_rules, split_values

    try:
        parse_rules(values)
    except UnknownRule as exc:
        raise click.BadParameter(str(exc)) from None
    return tuple(split_values(values)) or None


def _ignore_ops(_ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]) -> tuple[str, ...]:
    """`GLOB` or `RULE:GLOB`, checked here and parsed where the policy is built."""
    from .suppress import IgnoreOp, split_values

    texts = tuple(split_values(values))
    try:
        for text in texts:
            IgnoreOp.parse(text)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    return texts


def _tags(_ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(t for v in values for t in v.split(",") if t)


def _shapes(_ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]) -> dict[str, tuple[int, ...]]:
    shapes = {}
    for v in values:
        name, sep, dims = v.partition("=")
        try:
            if not sep or not name:
                raise ValueError
            shapes[name] = tuple(int(d) for d in dims.split(",") if d.strip())
        except ValueError:
            raise click.BadParameter(f"{v!r}: expected NAME=D0,D1,...") from None
    return shapes


def _probe_scales(_ctx: click.Context, _param: click.Parameter, value: str | None) -> tuple[float, ...] | None:
    if not value:
        return None
    try:
        return tuple(float(v) for v in value.split(",") if v.strip())
    except ValueError:
        raise click.BadParameter(f"{value!r}: expected numbers separated by commas") from None


def _shard(_ctx: click.Context, _param: click.Parameter, value: str | None) -> tuple[int, int] | None:
    from .shard import parse

    try:
        return parse(value) if value else None
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def _memory_limit(_ctx: click.Context, _param: click.Parameter, value: str | None) -> int | None:
    from .safety.sandbox import parse_memory_limit

    try:
        return None if value is None else parse_memory_limit(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def _declare(*decorators: Callable[[F], F]) -> Callable[[F], F]:
    """One decorator applying `decorators`; `--help` lists the options in the order written here."""

    def apply(f: F) -> F:
        for decorator in reversed(decorators):
            f = decorator(f)
        return f

    return apply


def fail_on(f: F) -> F:
    return click.option("--fail-on", type=click.Choice(FAIL_ON), default="error", show_default=True,
                        help="Lowest severity that makes the run fail (exit 1).")(f)


def exit_zero(f: F) -> F:
    return click.option("--exit-zero/--no-exit-zero", default=False,
                        help="Exit 0 even when findings fail the run (errors still exit 2).")(f)


def debug(f: F) -> F:
    return click.option("--debug", is_flag=True, help="Show Python tracebacks.")(f)


def reports(what: str) -> Callable[[F], F]:
    """Where `audit` and `merge` write `what` (the main report, the merged report) and the other formats."""
    return _declare(
        click.option("--format", "fmt", type=click.Choice(FORMATS), default="text", show_default=True,
                     help=f"Format of {what}."),
        click.option("--output", "-o", type=PATH, default=None, help=f"Write {what} here instead of stdout."),
        click.option("--json", "json_path", type=PATH, help="Also write the JSON report here."),
        click.option("--sarif", "sarif_path", type=PATH, help="Also write a SARIF 2.1.0 report here."),
        click.option("--junit", "junit_path", type=PATH, help="Also write a JUnit XML report here."),
        click.option("--markdown", "markdown_path", type=PATH, help="Also write a Markdown report here."),
        click.option("--html", "html_path", type=PATH,
                     help="Also write the HTML report (one self-contained file) here."),
    )


audit = _declare(
    click.option("--recursive/--no-recursive", "-r", default=False,
                 help="Search folders for SavedModels and audit each."),
    click.option("--jobs", "-j", type=click.IntRange(min=1), default=1, show_default=True,
                 help="Audit this many models at a time: this process and N-1 worker processes, each importing "
                      "TensorFlow once."),
    click.option("--shard", callback=_shard, metavar="K/N",
                 help="Audit only the K-th of N parts of the models found (by a hash of each model's path "
                      "relative to the folder it was found in: the same part on every machine). Merge the "
                      "parts' JSON reports with `gradaudit merge`."),
    click.option("--cache", type=click.Path(file_okay=False), default=None, metavar="DIR",
                 help="Keep each model's report in DIR; while nothing that decides it changes (the model's files, the "
                      "options and the files they name, gradaudit, TensorFlow, Python), the next run reads it back "
                      "instead of auditing (no TensorFlow import, no child process). Python targets are not cached."),
    click.option("--tag", "tags", multiple=True, default=("serve",), show_default=True, callback=_tags,
                 help="Meta graph tag (repeat, or comma-separate, for a tag set)."),
    click.option("--signature", default="serving_default", show_default=True,
                 help="Signature key to audit (or a saved function's name for a model without signatures)."),
    click.option("--all-signatures/--no-all-signatures", default=False, help="Audit every signature in turn."),
    click.option("--static-only/--no-static-only", default=False,
                 help="Only the static pass: never load or run the model (a module:attr target is still "
                      "imported, which runs its module's code)."),
    click.option("--select", multiple=True, metavar="RULE", callback=_rules,
                 help="Only these rules: code, code prefix or slug (repeat or comma-separate; default: all)."),
    click.option("--ignore", multiple=True, metavar="RULE", callback=_rules,
                 help="Not these rules: code, code prefix or slug (repeat or comma-separate)."),
    click.option("--ignore-ops", multiple=True, metavar="[RULE:]GLOB", callback=_ignore_ops,
                 help="Findings on ops whose name matches GLOB (for RULE only, if given) are intended: reported "
                      "as suppressed, never failing."),
    click.option("--baseline", type=click.Path(dir_okay=False),
                 help="A previous JSON report: findings already in it are reported as known and do not fail."),
    click.option("--write-baseline", type=PATH, help="Write this run's JSON report here, to use as --baseline."),
    fail_on,
    exit_zero,
    reports("the main report"),
    click.option("--seed", type=int, default=0, show_default=True,
                 help="Seed for synthesised inputs and directions."),
    click.option("--batch-size", type=click.IntRange(min=1), default=2, show_default=True,
                 help="Size of unknown first dimensions."),
    click.option("--dim", type=click.IntRange(min=1), default=4, show_default=True,
                 help="Size of other unknown dimensions."),
    click.option("--shape", "shapes", multiple=True, metavar="NAME=D0,D1,...", callback=_shapes,
                 help="Shape of one input."),
    click.option("--inputs", "inputs_file", type=click.Path(exists=True, dir_okay=False), default=None,
                 help="An .npz file of real inputs, by signature input key."),
    click.option("--order", type=click.IntRange(1, 2), default=1, show_default=True,
                 help="2: also check second derivatives (Hessian-vector products)."),
    click.option("--probe-scales", metavar="S0,S1,...", callback=_probe_scales, default=None,
                 help="Input scales of the stability probes (default: 0,1e-30,1e-20,1e-10,1e-3,1,1e2,1e4)."),
    click.option("--precision", type=click.Choice(("float16", "bfloat16")), default=None,
                 help="Also check whether the model would train in this precision: gradients that flush to zero "
                      "or overflow, the loss scale a dynamic loss scaler settles on, ops whose outputs overflow."),
    click.option("--local-checks", type=click.Choice(("auto", "always", "never")), default="auto",
                 show_default=True,
                 help="Check each op's gradient on its own at the values the model's forward gave it, and let those "
                      "checks decide the numeric checks (the whole-model checks run only where they leave an op "
                      "undecided). auto: for models of a million trainable parameters or more; never: always the "
                      "whole-model checks, in float64 where the model allows."),
    click.option("--input-spec", "input_specs", multiple=True, metavar="NAME=DTYPE[D0,...]",
                 help="Input of a Python function traced without an input_signature, e.g. x=float32[None,4]."),
    click.option("--allow-unsafe-ops", is_flag=True,
                 help="Run models holding ops or files not proven safe (GA401 file, network, process or "
                      "Python ops; GA402 ops off the reviewed list; GA403 assets outside the model), and load "
                      "Keras files holding Python code. Command line only: a configuration file cannot set it."),
    click.option("--timeout", type=_SECONDS, default=DEFAULT_TIMEOUT, show_default=True,
                 metavar="SECONDS",
                 help="Bound the part that runs the model (numeric checks, probes): it runs in a sandboxed child "
                      "process and the audit is incomplete when it takes longer; the static report stays. 0: no "
                      "bound, and the model runs in gradaudit's own process, without sandbox or memory limit."),
    click.option("--memory-limit", callback=_memory_limit, metavar="SIZE",
                 help="Memory for the child process that runs the model (4G, 512M; 0: no limit). Default: half "
                      "of the physical memory. A model that needs more makes the audit incomplete."),
    click.option("--load-ops", "load_ops", multiple=True, metavar="PACKAGE_OR_SO",
                 help="Import a Python package (tensorflow_text, tensorflow_decision_forests) or load a shared "
                      "library (tf.load_op_library) before the audit, so its custom ops and gradients are known. "
                      "Repeatable. Runs that code: command line or configuration file only."),
    debug,
)


@dataclass(frozen=True)
class AuditRun:
    """What `gradaudit audit` was asked, one field per option above (and the models)."""

    models: tuple[str, ...]
    recursive: bool
    jobs: int
    shard: tuple[int, int] | None
    cache: str | None
    tags: tuple[str, ...]
    signature: str
    all_signatures: bool
    static_only: bool
    select: tuple[str, ...] | None
    ignore: tuple[str, ...] | None
    ignore_ops: tuple[str, ...]
    baseline: str | None
    write_baseline: str | None
    fail_on: str
    exit_zero: bool
    fmt: str
    output: str | None
    json_path: str | None
    sarif_path: str | None
    junit_path: str | None
    markdown_path: str | None
    html_path: str | None
    seed: int
    batch_size: int
    dim: int
    shapes: dict[str, tuple[int, ...]]
    inputs_file: str | None
    order: int
    probe_scales: tuple[float, ...] | None
    precision: str | None
    local_checks: str
    input_specs: tuple[str, ...]
    allow_unsafe_ops: bool
    timeout: float
    memory_limit: int | None
    load_ops: tuple[str, ...]
    debug: bool

    def targets(self) -> list[tuple[str, str | None]]:
        """(format, path) of every report to write: the main one (stdout when `output` is None), each
        `--json`/`--sarif`/... given, then the baseline to write."""
        return [*report_targets(self.fmt, self.output, json=self.json_path, sarif=self.sarif_path,
                                junit=self.junit_path, markdown=self.markdown_path, html=self.html_path),
                *([("json", self.write_baseline)] if self.write_baseline else [])]


def report_targets(fmt: str, output: str | None, **also: str | None) -> list[tuple[str, str | None]]:
    """(format, path) of the main report (stdout when `output` is None), then of each other format given."""
    return [(fmt, output), *((name, path) for name, path in also.items() if path)]


def collected(cls: type) -> Callable[[Callable[[Any], None]], Callable[..., None]]:
    """Hand a click command's values to its function as one `cls` object instead of one argument each."""

    def decorator(f: Callable[[Any], None]) -> Callable[..., None]:
        def command(**values: Any) -> None:
            f(cls(**values))

        command.__name__, command.__doc__ = f.__name__, f.__doc__
        return command

    return decorator


def api_config(path: str | os.PathLike[str], names: Collection[str]) -> dict[str, Any]:
    """For the Python API: the values a configuration file sets for the options whose parameter names are in
    `names`, checked as the command line checks them and converted as the command receives them; a key of
    another option is an error."""
    config = read(Path(path))
    command = click.command("audit")(audit(lambda **_: None))
    ctx = click.Context(command)
    defaults = default_map(config, ctx)  # each key and value checked
    by_key = {option_key(p): p for p in command.params}
    for key in config.values:
        if by_key[key].name not in names:
            raise ConfigError(f"{config.where}: key {key!r} is not read by the Python API: it is an option of "
                              "the command line only")
    return {p.name: p.process_value(ctx, defaults[p.name]) for p in command.params if p.name in defaults}
