"""The results a model's child process sends its parent, as data that cannot execute: gradaudit's frozen
dataclasses to JSON values and back, every field checked against its annotation on the way in. The child is
not trusted once it has run a model, so what it sends is parsed, never unpickled (isolate.py)."""

from __future__ import annotations

import dataclasses
import enum
import numbers
import types
import typing
from functools import cache
from typing import Any, Literal, Union

MAX_DEPTH = 32  # a report nests four levels deep; anything deeper is not one of ours
MAX_STRING = 1 << 20  # one field's characters: a message or a name


class WireError(ValueError):
    """What arrived is not the value it claims to be."""


def encode(value: Any) -> Any:
    """A dataclass (and what it holds: enums, tuples, lists, numbers, strings) as JSON values."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: encode(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.value
    if value is None or isinstance(value, (str, bool)):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, (list, tuple)):
        return [encode(v) for v in value]
    raise TypeError(f"cannot send a {type(value).__name__} between processes")


@cache
def _hints(cls: Any) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def decode(hint: Any, data: Any, where: str = "result", depth: int = 0) -> Any:
    """`data` (parsed JSON) as a value of type `hint`: a dataclass, an enum, a Literal of strings, `X | None`,
    `tuple[X, ...]`, `list[X]`, str, int, float or bool. Raises WireError naming the first field that does not fit."""
    if depth > MAX_DEPTH:
        raise WireError(f"{where}: nested too deep")
    origin = typing.get_origin(hint)
    if origin in (Union, types.UnionType):
        return _decode_union(typing.get_args(hint), data, where, depth)
    if origin in (tuple, list):
        if not isinstance(data, list):
            raise WireError(f"{where}: expected a list")
        args = typing.get_args(hint)
        item = args[0] if args else Any
        values = [decode(item, v, f"{where}[{i}]", depth + 1) for i, v in enumerate(data)]
        return tuple(values) if origin is tuple else values
    if origin is Literal:
        allowed = typing.get_args(hint)
        if isinstance(data, str) and data in allowed:
            return data
        raise WireError(f"{where}: {data!r:.40} is not one of {', '.join(map(str, allowed))}")
    if hint is Any:
        raise WireError(f"{where}: no type to check it against")
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _decode_dataclass(hint, data, where, depth)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        try:
            return hint(data)
        except ValueError:
            raise WireError(f"{where}: {data!r:.40} is not a {hint.__name__}") from None
    return _scalar(hint, data, where)


def _decode_union(arms: tuple[Any, ...], data: Any, where: str, depth: int) -> Any:
    """`data` as the first arm of `X | Y | None` it fits."""
    if data is None and type(None) in arms:
        return None
    errors = []
    for arm in arms:
        if arm is type(None):
            continue
        try:
            return decode(arm, data, where, depth + 1)
        except WireError as exc:
            errors.append(str(exc))
    raise WireError(errors[0] if errors else f"{where}: expected a value")


def _decode_dataclass(cls: Any, data: Any, where: str, depth: int) -> Any:
    if not isinstance(data, dict):
        raise WireError(f"{where}: expected an object")
    hints = _hints(cls)
    known = {f.name: f for f in dataclasses.fields(cls) if f.init}
    extra = set(data) - set(known)
    if extra:
        raise WireError(f"{where}: unexpected field {sorted(extra)[0]!r:.60}")
    values = {}
    for name, f in known.items():
        if name in data:
            values[name] = decode(hints[name], data[name], f"{where}.{name}", depth + 1)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise WireError(f"{where}: missing field {name!r}")
    try:
        return cls(**values)
    except (TypeError, ValueError) as exc:  # fields of the right types that the value itself refuses together
        raise WireError(f"{where}: {exc}") from None


def _scalar(hint: Any, data: Any, where: str) -> Any:
    if hint is bool:
        if isinstance(data, bool):
            return data
    elif hint is int:
        if isinstance(data, int) and not isinstance(data, bool):
            return data
    elif hint is float:
        if isinstance(data, (int, float)) and not isinstance(data, bool):
            return float(data)
    elif hint is str:
        if isinstance(data, str):
            if len(data) > MAX_STRING:
                raise WireError(f"{where}: a string of {len(data)} characters")
            return data
    else:
        raise WireError(f"{where}: cannot check a {hint!r}")
    raise WireError(f"{where}: expected {hint.__name__}, got {type(data).__name__}")

