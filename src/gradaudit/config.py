"""Configuration: `[tool.gradaudit]` of the nearest pyproject.toml, or `--config FILE`. Keys are the audit
command's option names; every key and value is checked here, then handed to click as defaults, so that
default < configuration < command line."""

from __future__ import annotations

import difflib
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10
    import tomli as tomllib

from .errors import GradauditError

PYPROJECT = "pyproject.toml"
# Options that make no sense in a file (the file itself, --help), and one a file must not decide: a
# pyproject.toml found above the working folder may come with the untrusted checkout being audited.
NOT_KEYS = frozenset({"config", "help"})
COMMAND_LINE_ONLY = frozenset({"allow-unsafe-ops"})
# Values a file must not give for the same reason: they turn the sandbox off. `timeout = 0` runs the model
# in gradaudit's own process, unconfined; `memory-limit = 0` (or "none") lifts the memory limit. Positive
# values are allowed.
COMMAND_LINE_ONLY_ZERO = frozenset({"timeout", "memory-limit"})
# Options that write files (or, --cache, a folder of them): a file may only point them inside its own folder (a
# checkout's pyproject.toml must not write a report over ~/.bashrc); the command line may point them anywhere.
WRITTEN = frozenset({"output", "json", "sarif", "junit", "markdown", "html", "write-baseline", "cache"})


class ConfigError(GradauditError):
    pass


@dataclass(frozen=True)
class Config:
    path: Path | None = None  # None: no configuration file
    values: dict[str, Any] = field(default_factory=dict)

    @property
    def where(self) -> str:
        return f"{self.path} [tool.gradaudit]" if self.path and self.path.name == PYPROJECT else str(self.path)


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            data: dict[str, Any] = tomllib.load(f)
            return data
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the configuration: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None


def _table(doc: dict[str, Any]) -> Any:
    tool = doc.get("tool")
    return tool.get("gradaudit") if isinstance(tool, dict) else None


def find(start: Path) -> Path | None:
    """The nearest pyproject.toml with a [tool.gradaudit] table, from `start` upward (as ruff looks for [tool.ruff])."""
    for folder in (start, *start.parents):
        candidate = folder / PYPROJECT
        if candidate.is_file() and _table(_read_toml(candidate)) is not None:
            return candidate
    return None


def read(path: Path) -> Config:
    """A pyproject.toml holds the options in [tool.gradaudit]; any other TOML file holds them at its top level."""
    doc = _read_toml(path)
    values = _table(doc) if path.name == PYPROJECT else doc
    if values is None:
        raise ConfigError(f"{path}: no [tool.gradaudit] table")
    if not isinstance(values, dict):
        raise ConfigError(f"{path}: [tool.gradaudit] must be a table")
    return Config(path.resolve(), values)


def load(explicit: str | None, cwd: Path) -> Config:
    if explicit:
        return read(Path(explicit))
    found = find(cwd.resolve())
    return read(found) if found else Config()


def option_key(param: click.Parameter) -> str | None:
    """`--fail-on` -> `fail-on`: the configuration key of an option (its first long name)."""
    if not isinstance(param, click.Option):
        return None
    longs = [o for o in param.opts if o.startswith("--")]
    return longs[0][2:] if longs else None


def default_map(config: Config, ctx: click.Context) -> dict[str, Any]:
    """Click's `default_map` for `ctx.command` from `config`; ConfigError names the first bad key or value."""
    options = {k: p for p in ctx.command.params if (k := option_key(p)) and k not in NOT_KEYS}
    defaults: dict[str, Any] = {}
    for key, value in config.values.items():
        if key in COMMAND_LINE_ONLY:
            raise _command_line_only(config, key)
        param = options.get(key)
        if not isinstance(param, click.Option):
            close = difflib.get_close_matches(key.replace("_", "-"), options, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else f"; keys are: {', '.join(sorted(options))}"
            raise ConfigError(f"{config.where}: unknown key {key!r}{hint}")
        defaults[param.name] = _value(config, key, param, value, ctx)
        if key in COMMAND_LINE_ONLY_ZERO and _turns_off(param, defaults[param.name], ctx):
            raise _command_line_only(config, f"{key} = {value!r}", "it turns the sandbox off; timeout = 0 and "
                                     "memory-limit = 0 or \"none\" cannot be set in a configuration file")
    return defaults


def _command_line_only(config: Config, what: str,
                       why: str = "it cannot be set in a configuration file") -> ConfigError:
    return ConfigError(f"{config.where}: {what} can only be given on the command line (or to the Python API): "
                       f"{why}")


def _turns_off(param: click.Option, value: Any, ctx: click.Context) -> bool:
    """A `timeout` or `memory-limit` value that means none (0, "none"), as the option itself reads it."""
    if param.callback is not None:
        value = param.callback(ctx, param, value)
    return value is not None and value == 0


def _inside_project(config: Config, key: str, value: str) -> None:
    """A path a configuration file writes to must stay in the file's folder: relative, no `..` out of it,
    no symlink out of it."""
    assert config.path is not None
    project = os.path.realpath(config.path.parent)
    target = os.path.realpath(os.path.join(project, value))
    if os.path.isabs(value) or os.path.commonpath([project, target]) != project:
        raise ConfigError(f"{config.where}: {key}: {value!r} is outside the project ({project}); a configuration "
                          f"file may only write reports inside its folder (give --{key} on the command line "
                          "to write elsewhere)")


def _shaped(bad: Callable[[str], ConfigError], key: str, param: click.Option, value: Any) -> Any:
    """The value as the option takes it: a table only for per-rule values, a list for a repeatable option (one
    value becomes a list of it), true or false for a flag, one value otherwise."""
    if isinstance(value, dict):
        # A table is how per-rule values are written: ignore-ops = {zero-gradient = ["*ArgMax*"]}.
        if key != "ignore-ops":
            raise bad("expected a value, not a table")
        value = [f"{rule}:{glob}" for rule, globs in value.items()
                 for glob in ([globs] if isinstance(globs, str) else globs)]
    if param.multiple:
        value = [value] if isinstance(value, (str, int, float)) else value
        if not isinstance(value, list) or any(isinstance(v, (dict, list)) for v in value):
            raise bad("expected a list of values")
    elif param.is_flag and not isinstance(value, bool):
        raise bad(f"expected true or false, not {value!r}")
    elif isinstance(value, (list, dict)):
        raise bad("expected one value, not a list")
    return value


def _relative(config: Config, key: str, param: click.Option, value: Any) -> Any:
    """Paths in a file are relative to that file (and one it writes stays inside its folder); so is a shared
    library given to load-ops, while a package name stays a name."""
    if isinstance(param.type, click.Path) and isinstance(value, str) and config.path:
        if key in WRITTEN:
            _inside_project(config, key, value)
        value = str(config.path.parent / value)
    if key == "load-ops" and config.path:
        from .custom_ops import is_library

        value = [str(config.path.parent / v) if isinstance(v, str) and is_library(v) and not os.path.isabs(v)
                 else v for v in value]
    return value


def _value(config: Config, key: str, param: click.Option, value: Any, ctx: click.Context) -> Any:
    def bad(message: str) -> ConfigError:
        return ConfigError(f"{config.where}: {key}: {message}")

    value = _relative(config, key, param, _shaped(bad, key, param, value))
    try:
        converted = param.type_cast_value(ctx, value)
        if param.callback is not None:
            param.callback(ctx, param, converted)  # the option's own check (rule names, shapes)
    except click.BadParameter as exc:
        raise bad(exc.message) from None
    return converted
