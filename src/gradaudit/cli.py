"""Command line: parses options, calls the Python API, prints the report, sets the exit code.
No analysis happens here."""

from __future__ import annotations

import os
import sys

import click

EXIT_OK, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2
FAIL_ON = ("error", "warning", "info", "never")


def _quiet_tensorflow() -> None:
    """Import TensorFlow with its C++ start-up chatter (CUDA probes, oneDNN, absl) sent to /dev/null:
    it is not for our users, and it must not mix with our one-line errors on stderr."""
    if "tensorflow" in sys.modules:
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        import tensorflow  # noqa: F401
    except ImportError:
        pass  # reported where TensorFlow is used
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def _fail(message: str, debug: bool) -> None:
    if debug:
        raise
    click.echo(f"gradaudit: error: {message}", err=True)
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
    from . import __version__

    _quiet_tensorflow()
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


def _parse_shapes(values: tuple[str, ...]) -> dict[str, tuple[int, ...]]:
    shapes = {}
    for v in values:
        name, sep, dims = v.partition("=")
        try:
            if not sep or not name:
                raise ValueError
            shapes[name] = tuple(int(d) for d in dims.split(",") if d.strip())
        except ValueError:
            raise click.BadParameter(f"{v!r}: expected NAME=D0,D1,...", param_hint="--shape") from None
    return shapes


@main.command("audit")
@click.argument("model", type=click.Path())
@click.option("--tag", "tags", multiple=True, default=("serve",), show_default=True,
              help="Meta graph tag (repeat, or comma-separate, for a tag set).")
@click.option("--signature", default="serving_default", show_default=True,
              help="Signature key to audit (or a saved function's name for a model without signatures).")
@click.option("--all-signatures", is_flag=True, help="Audit every signature in turn.")
@click.option("--static-only", is_flag=True, help="Only the static pass: never load or run the model.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--output", "-o", type=click.Path(dir_okay=False, writable=True), default=None,
              help="Write the report here instead of stdout.")
@click.option("--fail-on", type=click.Choice(FAIL_ON), default="error", show_default=True,
              help="Lowest severity that makes the run fail (exit 1).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed for synthesised inputs and directions.")
@click.option("--batch-size", type=click.IntRange(min=1), default=2, show_default=True,
              help="Size of unknown first dimensions.")
@click.option("--dim", type=click.IntRange(min=1), default=4, show_default=True,
              help="Size of other unknown dimensions.")
@click.option("--shape", "shapes", multiple=True, metavar="NAME=D0,D1,...", help="Shape of one input.")
@click.option("--inputs", "inputs_file", type=click.Path(exists=True, dir_okay=False), default=None,
              help="An .npz file of real inputs, by signature input key.")
@click.option("--debug", is_flag=True, help="Show Python tracebacks.")
def audit_command(model, tags, signature, all_signatures, static_only, fmt, output, fail_on, seed,
                  batch_size, dim, shapes, inputs_file, debug) -> None:
    """Audit MODEL (a SavedModel folder)."""
    _quiet_tensorflow()
    from .api import AuditOptions, audit_saved_model, signature_keys
    from .errors import GradauditError
    from .report import REPORTERS, json_report
    from .report.terminal import print_report

    tag_set = tuple(t for v in tags for t in v.split(",") if t)
    try:
        opts = AuditOptions(tags=tag_set, signature=signature, static_only=static_only, seed=seed,
                            batch_size=batch_size, dim=dim, shapes=_parse_shapes(shapes),
                            inputs_file=inputs_file)
        keys = signature_keys(model, tag_set) if all_signatures else [signature]
        reports = [audit_saved_model(model, opts, key) for key in keys]
    except GradauditError as exc:
        _fail(str(exc), debug)
    except click.ClickException:
        raise
    except Exception as exc:  # noqa: BLE001 - one line, exit 2; --debug shows the traceback
        _fail(f"internal error: {exc.__class__.__name__}: {exc}", debug)

    if fmt == "json":
        if len(reports) == 1:
            text = json_report.render(reports[0], fail_on)
        else:
            text = json_report.render_many(reports, fail_on)
    elif output is not None:
        text = "\n".join(REPORTERS["text"](r, fail_on) for r in reports)
    else:
        text = None
    if text is None:
        from rich.console import Console

        console = Console()
        for r in reports:
            print_report(r, console, fail_on)
    elif output:
        with open(output, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        click.echo(text, nl=False)
    sys.exit(EXIT_FINDINGS if any(r.fails(fail_on) for r in reports) else EXIT_OK)


@main.command("rules")
def rules_command() -> None:
    """List every rule: code, slug, default severity, summary."""
    from .rules import ALL_RULES

    for r in ALL_RULES:
        click.echo(f"{r.code}  {r.slug:<22} {r.severity.value:<8} {r.summary}")


@main.command("explain")
@click.argument("code_or_slug")
def explain_command(code_or_slug: str) -> None:
    """Print a rule's documentation (what it does, why it matters, an example, what to write instead)."""
    from .rules import get_rule

    try:
        r = get_rule(code_or_slug)
    except KeyError:
        click.echo(f"gradaudit: error: no rule {code_or_slug!r} (see `gradaudit rules`)", err=True)
        sys.exit(EXIT_ERROR)
    click.echo(f"{r.code} {r.slug} ({r.severity.value})\n\n{r.doc}\n\nFix: {r.fix}")
