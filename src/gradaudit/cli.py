"""Command line: parses options, calls the Python API, prints the report, sets the exit code.
No analysis happens here."""

from __future__ import annotations

import os
import sys

import click

from .api import DEFAULT_TIMEOUT
from .report import FORMATS
from .report.changes import DIFF_REPORTERS

EXIT_OK, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2
FAIL_ON = ("error", "warning", "info", "never")


def _error(message: str) -> None:
    """One error line on stderr; names from the model in it are made printable (a CI log reads stderr too)."""
    from .report.common import printable

    click.echo(f"gradaudit: error: {printable(message)}", err=True)


def _fail(message: str, debug: bool) -> None:
    """One line and exit 2; with --debug the traceback first, and still exit 2 (never 1, which means
    findings)."""
    if debug:
        import traceback

        traceback.print_exc()
    _error(message)
    sys.exit(EXIT_ERROR)


class DefaultGroup(click.Group):
    """`gradaudit MODEL` runs the audit; `gradaudit rules` / `explain` are subcommands."""

    def parse_args(self, ctx, args):
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h", "--version"):
            args = ["audit", *args]
        elif not args:
            args = ["audit", "--help"]
        return super().parse_args(ctx, args)


def _version() -> str:
    from .batch import import_tensorflow_quietly
    from .version import __version__

    import_tensorflow_quietly()
    try:
        import tensorflow as tf

        tf_version = tf.__version__
    except ImportError:
        tf_version = "not installed"
    return f"gradaudit {__version__}, TensorFlow {tf_version}"


def _print_version(ctx, _param, value):
    if value and not ctx.resilient_parsing:
        click.echo(_version())
        ctx.exit()


@click.group(cls=DefaultGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_print_version,
              help="Print gradaudit's and TensorFlow's versions.")
def main() -> None:
    """Audit whether a TensorFlow model can really be differentiated, and where and why not."""
    from .interrupt import install

    # SIGTERM and Ctrl-C stop the child that runs the model and remove every temporary folder; exit
    # 128+signal, never 1 (findings).
    click.get_current_context().call_on_close(install())


def _rules(_ctx, _param, values: tuple[str, ...]) -> frozenset[str] | None:
    from .suppress import UnknownRule, parse_rules

    try:
        return parse_rules(values) if values else None
    except UnknownRule as exc:
        raise click.BadParameter(str(exc)) from None


def _ignore_ops(_ctx, _param, values: tuple[str, ...]):
    from .suppress import IgnoreOp, split_values

    try:
        return tuple(IgnoreOp.parse(v) for v in split_values(values))
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def _shapes(_ctx, _param, values: tuple[str, ...]) -> dict[str, tuple[int, ...]]:
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


def _probe_scales(_ctx, _param, value: str | None) -> tuple[float, ...] | None:
    if not value:
        return None
    try:
        return tuple(float(v) for v in value.split(",") if v.strip())
    except ValueError:
        raise click.BadParameter(f"{value!r}: expected numbers separated by commas") from None


class _Fatal(click.ClickException):
    """An error found while parsing options (configuration): one line, exit 2."""

    exit_code = EXIT_ERROR

    def show(self, file=None) -> None:
        _error(self.message)


def _config(ctx: click.Context, _param, value: str | None) -> None:
    """Eager: read the configuration before the other options, as their defaults."""
    from pathlib import Path

    from .config import default_map, load
    from .errors import GradauditError

    try:
        ctx.default_map = {**(ctx.default_map or {}), **default_map(load(value, Path.cwd()), ctx)}
    except GradauditError as exc:
        raise _Fatal(str(exc)) from None


_PATH = click.Path(dir_okay=False)


@main.command("audit")
@click.argument("models", nargs=-1, required=True, type=click.Path(), metavar="MODEL...")
@click.option("--config", type=click.Path(exists=True, dir_okay=False), is_eager=True, expose_value=False,
              callback=_config, help="Read options from this TOML file instead of [tool.gradaudit] in the "
                                     "nearest pyproject.toml.")
@click.option("--recursive/--no-recursive", "-r", default=False,
              help="Search folders for SavedModels and audit each.")
@click.option("--jobs", "-j", type=click.IntRange(min=1), default=1, show_default=True,
              help="Audit models in this many worker processes.")
@click.option("--shard", callback=lambda _c, _p, v: _shard(v), metavar="K/N",
              help="Audit only the K-th of N parts of the models found (by a hash of each model's path "
                   "relative to the folder it was found in: the same part on every machine). Merge the "
                   "parts' JSON reports with `gradaudit merge`.")
@click.option("--tag", "tags", multiple=True, default=("serve",), show_default=True,
              help="Meta graph tag (repeat, or comma-separate, for a tag set).")
@click.option("--signature", default="serving_default", show_default=True,
              help="Signature key to audit (or a saved function's name for a model without signatures).")
@click.option("--all-signatures/--no-all-signatures", default=False, help="Audit every signature in turn.")
@click.option("--static-only/--no-static-only", default=False,
              help="Only the static pass: never load or run the model (a module:attr target is still "
                   "imported, which runs its module's code).")
@click.option("--select", multiple=True, metavar="RULE", callback=_rules,
              help="Only these rules: code, code prefix or slug (repeat or comma-separate; default: all).")
@click.option("--ignore", multiple=True, metavar="RULE", callback=_rules,
              help="Not these rules: code, code prefix or slug (repeat or comma-separate).")
@click.option("--ignore-ops", multiple=True, metavar="[RULE:]GLOB", callback=_ignore_ops,
              help="Findings on ops whose name matches GLOB (for RULE only, if given) are intended: reported "
                   "as suppressed, never failing.")
@click.option("--baseline", type=click.Path(dir_okay=False),
              help="A previous JSON report: findings already in it are reported as known and do not fail.")
@click.option("--write-baseline", type=_PATH, help="Write this run's JSON report here, to use as --baseline.")
@click.option("--fail-on", type=click.Choice(FAIL_ON), default="error", show_default=True,
              help="Lowest severity that makes the run fail (exit 1).")
@click.option("--exit-zero/--no-exit-zero", default=False,
              help="Exit 0 even when findings fail the run (errors still exit 2).")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="text", show_default=True,
              help="Format of the main report.")
@click.option("--output", "-o", type=_PATH, default=None, help="Write the main report here instead of stdout.")
@click.option("--json", "json_path", type=_PATH, help="Also write the JSON report here.")
@click.option("--sarif", "sarif_path", type=_PATH, help="Also write a SARIF 2.1.0 report here.")
@click.option("--junit", "junit_path", type=_PATH, help="Also write a JUnit XML report here.")
@click.option("--markdown", "markdown_path", type=_PATH, help="Also write a Markdown report here.")
@click.option("--html", "html_path", type=_PATH, help="Also write the HTML report (one self-contained file) here.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed for synthesised inputs and directions.")
@click.option("--batch-size", type=click.IntRange(min=1), default=2, show_default=True,
              help="Size of unknown first dimensions.")
@click.option("--dim", type=click.IntRange(min=1), default=4, show_default=True,
              help="Size of other unknown dimensions.")
@click.option("--shape", "shapes", multiple=True, metavar="NAME=D0,D1,...", callback=_shapes,
              help="Shape of one input.")
@click.option("--inputs", "inputs_file", type=click.Path(exists=True, dir_okay=False), default=None,
              help="An .npz file of real inputs, by signature input key.")
@click.option("--order", type=click.IntRange(1, 2), default=1, show_default=True,
              help="2: also check second derivatives (Hessian-vector products).")
@click.option("--probe-scales", metavar="S0,S1,...", callback=_probe_scales, default=None,
              help="Input scales of the stability probes (default: 0,1e-30,1e-20,1e-10,1e-3,1,1e2,1e4).")
@click.option("--input-spec", "input_specs", multiple=True, metavar="NAME=DTYPE[D0,...]",
              help="Input of a Python function traced without an input_signature, e.g. x=float32[None,4].")
@click.option("--allow-unsafe-ops", is_flag=True,
              help="Run models holding ops or files not proven safe (GA401 file, network, process or "
                   "Python ops; GA402 ops off the reviewed list; GA403 assets outside the model), and load "
                   "Keras files holding Python code. Command line only: a configuration file cannot set it.")
@click.option("--timeout", type=click.FloatRange(min=0), default=DEFAULT_TIMEOUT, show_default=True, metavar="SECONDS",
              help="Bound the part that runs the model (numeric checks, probes): it runs in a sandboxed child "
                   "process and the audit is incomplete when it takes longer; the static report stays. 0: no "
                   "bound, and the model runs in gradaudit's own process, without sandbox or memory limit.")
@click.option("--memory-limit", callback=lambda _c, _p, v: _memory_limit(v), metavar="SIZE",
              help="Memory for the child process that runs the model (4G, 512M; 0: no limit). Default: half "
                   "of the physical memory. A model that needs more makes the audit incomplete.")
@click.option("--load-ops", "load_ops", multiple=True, metavar="PACKAGE_OR_SO",
              help="Import a Python package (tensorflow_text, tensorflow_decision_forests) or load a shared "
                   "library (tf.load_op_library) before the audit, so its custom ops and gradients are known. "
                   "Repeatable. Runs that code: command line or configuration file only.")
@click.option("--debug", is_flag=True, help="Show Python tracebacks.")
def audit_command(models, recursive, jobs, shard, html_path, tags, signature, all_signatures, static_only, select,
                  ignore,
                  ignore_ops, baseline, write_baseline, fail_on, exit_zero, fmt, output, json_path, sarif_path,
                  junit_path, markdown_path, seed, batch_size, dim, shapes, inputs_file, order, probe_scales,
                  input_specs, allow_unsafe_ops, timeout, memory_limit, load_ops, debug) -> None:
    """Audit each MODEL: a SavedModel folder (or its saved_model.pb; with --recursive, a folder of them),
    a Keras file (.keras, .h5), or a Python object as module:attr or file.py:attr.

    A module:attr or file.py:attr target is imported, which runs that module's code, also with
    --static-only: audit only Python targets you would run yourself. SavedModels run only when every op
    they would run is proven harmless (see GA401-GA403).

    Options can also be set in [tool.gradaudit] of pyproject.toml, keyed by option name (fail-on = "warning");
    the command line wins."""
    from .batch import AuditFailure, audit_models, find_models, import_tensorflow_quietly

    import_tensorflow_quietly()
    from . import baseline as baselines
    from .api import AuditOptions
    from .errors import GradauditError
    from .report import terminal
    from .suppress import Policy

    tag_set = tuple(t for v in tags for t in v.split(",") if t)
    try:
        paths = find_models(models, recursive)
        if shard:
            from .shard import select as select_shard

            paths = select_shard(paths, models, shard)
            click.echo(f"gradaudit: shard {shard[0]}/{shard[1]}: {len(paths)} model(s)", err=True)
        policy = Policy(select=select, ignore=ignore or frozenset(), ignore_ops=ignore_ops,
                        baseline=baselines.load(baseline) if baseline else None)
        opts = AuditOptions(tags=tag_set, signature=signature, static_only=static_only, seed=seed,
                            batch_size=batch_size, dim=dim, shapes=shapes, inputs_file=inputs_file,
                            order=order, probe_scales=probe_scales, input_specs=tuple(input_specs),
                            allow_unsafe_ops=allow_unsafe_ops, timeout=timeout or None, memory_limit=memory_limit,
                            load_ops=tuple(load_ops))
        with terminal.progress(len(paths)) as advance, terminal.status(len(paths) == 1):
            audits = audit_models(paths, opts, all_signatures=all_signatures, jobs=jobs, debug=debug,
                                  on_done=advance)
    except GradauditError as exc:
        _fail(str(exc), debug)
    except Exception as exc:  # noqa: BLE001 - one line, exit 2; --debug shows the traceback
        from .errors import InternalError

        _fail(str(InternalError("preparing the audit", exc)), debug)

    failures: list[AuditFailure] = [a.failure for a in audits if a.failure]
    reports = [policy.apply(r) for a in audits for r in a.reports]
    for failure in failures:
        _error(failure.error)
    changes = _since_baseline(baseline, reports, debug) if baseline else None
    if reports or shard:  # an empty shard still writes its report, for `merge`
        targets = _targets(fmt, output, json=json_path, sarif=sarif_path, junit=junit_path, markdown=markdown_path,
                           html=html_path)
        if write_baseline:
            targets.append(("json", write_baseline))
        _write(targets, reports, fail_on, failures, changes, debug)
    if failures:
        sys.exit(EXIT_ERROR)
    if changes is not None and changes.fails() and not exit_zero:  # a pair lost its gradient since the baseline
        sys.exit(EXIT_FINDINGS)
    sys.exit(EXIT_FINDINGS if not exit_zero and any(r.gate_fails(fail_on) for r in reports) else EXIT_OK)


def _memory_limit(value: str | None) -> int | None:
    from .safety.sandbox import parse_memory_limit

    try:
        return None if value is None else parse_memory_limit(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def _shard(value: str | None) -> tuple[int, int] | None:
    from .shard import parse

    try:
        return parse(value) if value else None
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def _since_baseline(baseline: str, reports, debug: bool):
    from .errors import GradauditError
    from .report.diff import since_baseline
    from .report.json_load import load

    try:
        return since_baseline(load(baseline).reports, reports, baseline)
    except GradauditError as exc:
        _fail(str(exc), debug)


def _write(targets, reports, fail_on: str, failures, changes, debug: bool) -> None:
    """Each (format, path) report of a run; the text report without a path goes to the terminal."""
    from .report import terminal
    from .report.changes import render_run, render_text

    for name, path in targets:
        if name == "text" and path is None:
            terminal.print_reports(reports, terminal.console(), fail_on, failures)
            if changes is not None and changes.changed():
                click.echo("\n" + render_text(changes), nl=False)
        else:
            _emit(render_run(name, reports, fail_on, failures, changes), path, debug)


def _targets(fmt: str, output: str | None, **also: str | None) -> list[tuple[str, str | None]]:
    """(format, path) of every report to write: the main one (stdout when `output` is None), then each
    `--json`/`--sarif`/... given."""
    return [(fmt, output), *((name, path) for name, path in also.items() if path)]


def _emit(text: str, path: str | None, debug: bool) -> None:
    if path is None:
        click.echo(text, nl=False)
        return
    try:
        folder = os.path.dirname(path)
        if folder:
            os.makedirs(folder, exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as exc:
        _fail(f"{path}: cannot write the report: {exc.strerror or exc}", debug)


@main.command("rules")
@click.option("--markdown", is_flag=True, help="Print the rules' reference page (docs/rules.md) instead.")
def rules_command(markdown: bool) -> None:
    """List every rule: code, slug, default severity, summary."""
    from .rules import ALL_RULES

    if markdown:
        from .rules.docs import markdown as page

        click.echo(page(), nl=False)
        return
    width = max(len(r.slug) for r in ALL_RULES)
    for r in ALL_RULES:
        click.echo(f"{r.code}  {r.slug:<{width}} {r.severity.value:<8} {r.summary}")


@main.command("explain")
@click.argument("code_or_slug")
def explain_command(code_or_slug: str) -> None:
    """Print a rule's documentation (what it does, why it matters, an example, what to write instead)."""
    from .rules import get_rule

    try:
        r = get_rule(code_or_slug)
    except KeyError:
        _error(f"no rule {code_or_slug!r} (see `gradaudit rules`)")
        sys.exit(EXIT_ERROR)
    click.echo(f"{r.code} {r.slug} ({r.severity.value})\n\n{r.doc}\n\nFix: {r.fix}")


@main.command("merge")
@click.argument("reports", nargs=-1, required=True, type=click.Path(dir_okay=False), metavar="REPORT.json...")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="text", show_default=True,
              help="Format of the merged report.")
@click.option("--output", "-o", type=_PATH, default=None, help="Write the merged report here instead of stdout.")
@click.option("--json", "json_path", type=_PATH, help="Also write the merged JSON report here.")
@click.option("--sarif", "sarif_path", type=_PATH, help="Also write a SARIF 2.1.0 report here.")
@click.option("--junit", "junit_path", type=_PATH, help="Also write a JUnit XML report here.")
@click.option("--markdown", "markdown_path", type=_PATH, help="Also write a Markdown report here.")
@click.option("--html", "html_path", type=_PATH, help="Also write the HTML report here.")
@click.option("--fail-on", type=click.Choice(FAIL_ON), default="error", show_default=True,
              help="Lowest severity that makes the run fail (exit 1).")
@click.option("--exit-zero/--no-exit-zero", default=False, help="Exit 0 even when findings fail the run.")
@click.option("--debug", is_flag=True, help="Show Python tracebacks.")
def merge_command(reports, fmt, output, json_path, sarif_path, junit_path, markdown_path, html_path, fail_on,
                  exit_zero, debug) -> None:
    """Merge the JSON reports of `--shard K/N` runs into one report and one exit code: 2 when a shard could
    not audit a model, else 1 when a report fails, else 0."""
    from .batch import AuditFailure, import_tensorflow_quietly
    from .errors import GradauditError
    from .report.json_load import load
    from .shard import merge

    import_tensorflow_quietly()  # the merged report names the TensorFlow version; its start-up chatter is not ours
    try:
        merged, errors = merge([load(path) for path in reports])
    except GradauditError as exc:
        _fail(str(exc), debug)
    failures = [AuditFailure(path, error) for path, error in errors]
    for failure in failures:
        _error(failure.error)
    _write(_targets(fmt, output, json=json_path, sarif=sarif_path, junit=junit_path, markdown=markdown_path,
                    html=html_path), merged, fail_on, failures, None, debug)
    if failures:
        sys.exit(EXIT_ERROR)
    sys.exit(EXIT_FINDINGS if not exit_zero and any(r.gate_fails(fail_on) for r in merged) else EXIT_OK)


@main.command("diff")
@click.argument("old", type=click.Path(dir_okay=False), metavar="OLD.json")
@click.argument("new", type=click.Path(dir_okay=False), metavar="NEW.json")
@click.option("--format", "fmt", type=click.Choice(tuple(DIFF_REPORTERS)), default="text", show_default=True,
              help="text for a terminal, markdown for a pull-request comment, json, or html (one file).")
@click.option("--output", "-o", type=_PATH, default=None, help="Write the changes here instead of stdout.")
@click.option("--exit-zero/--no-exit-zero", default=False, help="Exit 0 even when a pair lost its gradient.")
@click.option("--debug", is_flag=True, help="Show Python tracebacks.")
def diff_command(old, new, fmt, output, exit_zero, debug) -> None:
    """What changed between two JSON reports of the same models: flow pairs whose status changed (and the op
    that cuts them now), sources and outputs that appeared or disappeared, findings new or gone.
    Exit 1 when a pair lost its gradient (connected before, blocked or disconnected now)."""
    from .batch import import_tensorflow_quietly
    from .errors import GradauditError
    from .report.diff import compare
    from .report.json_load import load

    import_tensorflow_quietly()
    try:
        changes = compare(load(old).reports, load(new).reports, old, new)
    except GradauditError as exc:
        _fail(str(exc), debug)
    _emit(DIFF_REPORTERS[fmt](changes), output, debug)
    sys.exit(EXIT_FINDINGS if changes.fails() and not exit_zero else EXIT_OK)
