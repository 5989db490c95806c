"""Command line: parses options, calls the Python API, prints the report, sets the exit code.
No analysis happens here."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, NoReturn

import click

from . import options
from .options import AuditRun, collected, report_targets
from .report.changes import DIFF_REPORTERS

if TYPE_CHECKING:
    from .api import AuditOptions
    from .batch import ModelAudit
    from .cache import Cache
    from .model import Report
    from .report.diff import Diff
    from .suppress import Policy

EXIT_OK, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2
CONFIG_META = "gradaudit.config"  # ctx.meta: the configuration file read (config.Config)


def _error(message: str) -> None:
    """One error line on stderr; names from the model in it are made printable (a CI log reads stderr too)."""
    from .report.common import printable

    click.echo(f"gradaudit: error: {printable(message)}", err=True)


def _fail(message: str, debug: bool) -> NoReturn:
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

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        """Bad usage (an unknown option, a value out of range) is one line and exit 2, as every other bad
        input: click would print the usage and a hint around it."""
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        try:
            code = super().main(args, prog_name, complete_var, False, **extra)
        except click.UsageError as exc:
            _error(f"{exc.format_message()} (gradaudit --help lists the options)")
            sys.exit(EXIT_ERROR)
        except click.ClickException as exc:
            exc.show()
            sys.exit(exc.exit_code)
        except click.Abort:
            click.echo("Aborted!", err=True)
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else EXIT_OK)


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
        config = load(value, Path.cwd())
        ctx.default_map = {**(ctx.default_map or {}), **default_map(config, ctx)}
    except GradauditError as exc:
        raise _Fatal(str(exc)) from None
    ctx.meta[CONFIG_META] = config


def _load_ops_from_config(run: AuditRun) -> AuditRun:
    """`load-ops` from a configuration file (not from the command line) runs code the checkout being audited
    may ship: one line on stderr says so; with --static-only, which runs nothing, nothing of it is loaded."""
    import dataclasses

    from click.core import ParameterSource

    from .custom_ops import is_library
    from .report.common import printable

    ctx = click.get_current_context()
    config = ctx.meta.get(CONFIG_META)
    if not run.load_ops or config is None or ctx.get_parameter_source("load_ops") is not ParameterSource.DEFAULT_MAP:
        return run
    where = printable(str(config.path))
    if run.static_only:
        click.echo(f"gradaudit: load-ops from {where} not loaded with --static-only; pass --load-ops to load it",
                   err=True)
        return dataclasses.replace(run, load_ops=())
    for spec in run.load_ops:
        click.echo(f"gradaudit: {'loading' if is_library(spec) else 'importing'} {printable(spec)} (load-ops from "
                   f"{where} runs its code)", err=True)
    return run


@main.command("audit")
@click.argument("models", nargs=-1, required=True, type=click.Path(), metavar="MODEL...")
@click.option("--config", type=click.Path(exists=True, dir_okay=False), is_eager=True, expose_value=False,
              callback=_config, help="Read options from this TOML file instead of [tool.gradaudit] in the "
                                     "nearest pyproject.toml.")
@options.audit
@collected(AuditRun)
def audit_command(run: AuditRun) -> None:
    """Audit each MODEL: a SavedModel folder (or its saved_model.pb; with --recursive, a folder of them),
    a Keras file (.keras, .h5), or a Python object as module:attr or file.py:attr.

    A module:attr or file.py:attr target is imported, which runs that module's code, also with
    --static-only: audit only Python targets you would run yourself. SavedModels run only when every op
    they would run is proven harmless (see GA401-GA403).

    Options can also be set in [tool.gradaudit] of pyproject.toml, keyed by option name (fail-on = "warning");
    the command line wins."""
    from .batch import missing

    run = _load_ops_from_config(run)
    paths = _models(run)
    cache = _open_cache(run)
    found = cache.lookup(paths) if cache is not None else {}
    if any(not missing(p) for p in paths if p not in found):
        # a model to audit: TensorFlow is needed (a run read from the cache needs none, nor a missing path)
        _prepare_runtime(run)
    audits = _run_audits(run, paths, found)
    if cache is not None:
        cache.store(audits)
    policy = _policy(run)
    failures = [a.failure for a in audits if a.failure]
    reports = [policy.apply(r) for a in audits for r in a.reports]
    for failure in failures:
        _error(failure.error)
    changes = _since_baseline(run.baseline, reports, run.debug) if run.baseline else None
    if reports or run.shard:  # an empty shard still writes its report, for `merge`
        _write(run.targets(), reports, run.fail_on, failures, changes, run.debug)
    sys.exit(_exit_code(run, reports, bool(failures), changes))


def _prepare_runtime(run: AuditRun) -> None:
    """Before the first audit: the child that will run the models starts importing TensorFlow beside this
    process's own import."""
    if run.timeout and not run.static_only and run.jobs <= 1:  # models will run in children of this process
        from .isolate import prestart

        prestart(keep_warm=run.recursive or len(run.models) > 1)
    from .batch import import_tensorflow_quietly

    import_tensorflow_quietly()


def _open_cache(run: AuditRun) -> Cache | None:
    """--cache: the run's cache of reports (None without it)."""
    if run.cache is None:
        return None
    from .cache import Cache

    return Cache(run.cache, _audit_options(run), run.all_signatures, lambda line: click.echo(line, err=True))


@contextmanager
def _one_line_errors(debug: bool) -> Iterator[None]:
    """A usage or load error, or gradaudit failing before any audit: one line and exit 2 (--debug shows the
    traceback)."""
    from .errors import GradauditError, InternalError

    try:
        yield
    except GradauditError as exc:
        _fail(str(exc), debug)
    except Exception as exc:  # noqa: BLE001 - one line, exit 2; --debug shows the traceback
        _fail(str(InternalError("preparing the audit", exc)), debug)


def _models(run: AuditRun) -> list[str]:
    """Every model the command names, found and sharded; a usage error (a bad --select or --ignore included)
    exits 2 with one line before any model is read."""
    from .batch import find_models

    with _one_line_errors(run.debug):
        paths = find_models(run.models, run.recursive)
        if run.shard:
            from .shard import select as select_shard

            paths = select_shard(paths, run.models, run.shard)
            click.echo(f"gradaudit: shard {run.shard[0]}/{run.shard[1]}: {len(paths)} model(s)", err=True)
        _policy(run)
    return paths


def _run_audits(run: AuditRun, paths: list[str], found: dict[str, ModelAudit]) -> list[ModelAudit]:
    """The audits of `paths` in their order: those `found` in the cache, and the others audited."""
    from .batch import audit_models
    from .report import terminal

    missing = [p for p in paths if p not in found]
    to_stdout = bool(missing) and any(path is None for _, path in run.targets())
    with _one_line_errors(run.debug), terminal.progress(len(paths)) as advance, \
            terminal.status(len(missing) == 1), _stdout_away(to_stdout):
        for audit in found.values():
            advance(audit)
        audited = iter(audit_models(missing, _audit_options(run), all_signatures=run.all_signatures, jobs=run.jobs,
                                    debug=run.debug, on_done=advance) if missing else ())
    return [found[p] if p in found else next(audited) for p in paths]


def _exit_code(run: AuditRun, reports: list[Report], failed: bool, changes: Diff | None) -> int:
    """2 when a model could not be audited; 1 when a report fails its gate or a pair lost its gradient since the
    baseline (unless --exit-zero); else 0."""
    if failed:
        return EXIT_ERROR
    if run.exit_zero:
        return EXIT_OK
    if changes is not None and changes.fails():
        return EXIT_FINDINGS
    return EXIT_FINDINGS if any(r.gate_fails(run.fail_on) for r in reports) else EXIT_OK


def _flush_c_stdio() -> None:
    """Flush the C library's stdout buffer (where TensorFlow's PrintV2 writes through std::cout)."""
    try:
        import ctypes

        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError, TypeError):  # no C library to ask (Windows): nothing buffered there by us
        pass


@contextmanager
def _stdout_away(active: bool) -> Iterator[None]:
    """While the audit runs, when the report goes to stdout: file descriptor 1 and sys.stdout point at
    /dev/null, so that a model run in this process (--timeout 0: PrintV2 to stdout, a Python target's print)
    cannot corrupt the report (`--format json` that no longer parses, injected `::error` lines, escape
    codes); the real stdout is restored before the report is written. What the model printed is dropped."""
    if not active:
        yield
        return
    try:
        sys.stdout.flush()
        _flush_c_stdio()
        saved = os.dup(1)
    except (OSError, ValueError):  # no file descriptor 1 (closed): nothing of the model can reach it either
        yield
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    real = sys.stdout
    try:
        os.dup2(devnull, 1)
        with open(os.devnull, "w", encoding="utf-8") as sink:
            sys.stdout = sink
            try:
                yield
            finally:
                sys.stdout = real
                _flush_c_stdio()  # what the model left buffered goes to /dev/null, not into the report
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(devnull)


def _audit_options(run: AuditRun) -> AuditOptions:
    """The one place the command's values become the Python API's AuditOptions."""
    from .api import AuditOptions

    return AuditOptions(tags=run.tags, signature=run.signature, static_only=run.static_only, seed=run.seed,
                        batch_size=run.batch_size, dim=run.dim, shapes=run.shapes, inputs_file=run.inputs_file,
                        order=run.order, probe_scales=run.probe_scales, input_specs=run.input_specs,
                        allow_unsafe_ops=run.allow_unsafe_ops, timeout=run.timeout or None,
                        memory_limit=run.memory_limit, load_ops=run.load_ops, precision=run.precision,
                        local_checks=run.local_checks)  # type: ignore[arg-type]


def _policy(run: AuditRun) -> Policy:
    """Which findings count: --select, --ignore, --ignore-ops (checked when parsed) and the --baseline."""
    from . import baseline
    from .suppress import IgnoreOp, Policy, parse_rules

    return Policy(select=parse_rules(run.select) if run.select else None, ignore=parse_rules(run.ignore or ()),
                  ignore_ops=tuple(IgnoreOp.parse(text) for text in run.ignore_ops),
                  baseline=baseline.load(run.baseline) if run.baseline else None)


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
@options.reports("the merged report")
@options.fail_on
@options.exit_zero
@options.debug
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
    _write(report_targets(fmt, output, json=json_path, sarif=sarif_path, junit=junit_path, markdown=markdown_path,
                          html=html_path), merged, fail_on, failures, None, debug)
    if failures:
        sys.exit(EXIT_ERROR)
    sys.exit(EXIT_FINDINGS if not exit_zero and any(r.gate_fails(fail_on) for r in merged) else EXIT_OK)


@main.command("diff")
@click.argument("old", type=click.Path(dir_okay=False), metavar="OLD.json")
@click.argument("new", type=click.Path(dir_okay=False), metavar="NEW.json")
@click.option("--format", "fmt", type=click.Choice(tuple(DIFF_REPORTERS)), default="text", show_default=True,
              help="text for a terminal, markdown for a pull-request comment, json, or html (one file).")
@click.option("--output", "-o", type=options.PATH, default=None, help="Write the changes here instead of stdout.")
@click.option("--exit-zero/--no-exit-zero", default=False, help="Exit 0 even when a pair lost its gradient.")
@options.debug
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
