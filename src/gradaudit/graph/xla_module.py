"""Which results of a compiled module (`XlaCallModule`, from JAX's exporter) depend on which of its arguments,
read from the StableHLO module saved in the op: TensorFlow's own MLIR bindings turn the serialized module
into text (nothing runs), and each function's values are followed through its ops and calls."""

from __future__ import annotations

import functools
import hashlib
import logging
import re

log = logging.getLogger(__name__)

_FUNC = re.compile(r"^\s*func\.func\s+(?:public\s+|private\s+)?@(\"[^\"]*\"|[\w.$-]+)\((.*?)\)\s*(?:->|\{)")
_ARG = re.compile(r"(%[\w.$-]+)\s*:")
_VALUE = re.compile(r"%[\w.$-]+(?:#\d+)?")
_DEF = re.compile(r"^\s*((?:%[\w.$-]+(?::\d+)?\s*,\s*)*%[\w.$-]+(?::\d+)?)\s*=\s*(.*)$")
_CALL = re.compile(r"\bcall\s+@(\"[^\"]*\"|[\w.$-]+)\((.*?)\)")
_STRING = re.compile(r'(?<!@)"(?:[^"\\]|\\.)*"')  # string attributes; @"name" symbols stay
# results that depend on their operand's shape only, not its values
_SHAPE_ONLY = ("stablehlo.get_dimension_size", "get_dimension_size")


def module_dependencies(module: bytes) -> tuple[frozenset[int], ...] | None:
    """Per result of the module's `main`: the arguments its value depends on; None when the module cannot be
    read here."""
    return _cached(hashlib.sha256(module).hexdigest(), module)


@functools.lru_cache(maxsize=256)
def _cached(_digest: str, module: bytes) -> tuple[frozenset[int], ...] | None:
    try:
        text = _module_text(module)
        return _Module(text).summary("main")
    except Exception as exc:  # noqa: BLE001 - an unreadable module is "cannot be read", never a crash
        log.debug("compiled module not readable: %s", exc)
        return None


def _module_text(module: bytes) -> str:
    from tensorflow.compiler.mlir.stablehlo import stablehlo
    from tensorflow.python import _pywrap_mlir

    raw = stablehlo.deserialize_portable_artifact_str(module)
    text = _pywrap_mlir.ExperimentalRunPassPipeline(raw, b"canonicalize", False)
    return text.decode() if isinstance(text, bytes) else str(text)


class _Module:
    def __init__(self, text: str):
        self.functions: dict[str, tuple[list[str], list[str]]] = {}  # name -> (argument names, body lines)
        current: list[str] | None = None
        depth = 0
        for line in text.splitlines():
            m = _FUNC.match(line) if current is None else None
            if m:
                name = m.group(1).strip('"')
                current = []
                self.functions[name] = (list(_ARG.findall(_STRING.sub('""', m.group(2)))), current)
                depth = line.count("{") - line.count("}")
                continue
            if current is not None:
                clean = _STRING.sub('""', line)
                depth += clean.count("{") - clean.count("}")
                if depth <= 0:
                    current = None
                else:
                    current.append(clean)
        self._summaries: dict[str, tuple[frozenset[int], ...]] = {}
        self._active: set[str] = set()

    def summary(self, name: str) -> tuple[frozenset[int], ...]:
        """Per result of function `name`: the arguments its value depends on."""
        if name in self._summaries:
            return self._summaries[name]
        if name in self._active or name not in self.functions:
            raise ValueError(f"cannot follow function {name}")
        self._active.add(name)
        args, body = self.functions[name]
        deps: dict[str, frozenset[int]] = {a: frozenset({i}) for i, a in enumerate(args)}
        result: tuple[frozenset[int], ...] | None = None
        for line in _statements(body):
            stripped = line.strip()
            if stripped.startswith(("return ", "func.return ")):
                values = _VALUE.findall(stripped.split(":", 1)[0])
                result = tuple(_of(deps, v) for v in values)
            else:
                self._define(deps, line)
        self._active.discard(name)
        if result is None:
            raise ValueError(f"no return in {name}")
        self._summaries[name] = result
        return result

    def _define(self, deps: dict[str, frozenset[int]], line: str) -> None:
        """Record in `deps` what the values a statement defines depend on: a call's results by the callee's
        summary, any other op's by the values it reads (none for an op that reads only a shape)."""
        m = _DEF.match(line)
        if not m:
            return
        targets, rhs = m.group(1), m.group(2)
        bases = [t.strip().partition(":")[0] for t in targets.split(",")]
        call = _CALL.search(rhs)
        if call is not None:
            callee = self.summary(call.group(1).strip('"'))
            operands = _VALUE.findall(call.group(2))
            outs = [frozenset().union(*(_of(deps, operands[j]) for j in res if j < len(operands))) for res in callee]
            for k, d in enumerate(outs):
                deps[f"{bases[0]}#{k}"] = d
            deps[bases[0]] = frozenset().union(*outs) if outs else frozenset()
            return
        used = frozenset() if rhs.lstrip().startswith(_SHAPE_ONLY) else frozenset().union(
            *(_of(deps, v) for v in _VALUE.findall(rhs.split(" : ", 1)[0] if "({" not in rhs else rhs)))
        for base in bases:
            deps[base] = used


def _of(deps: dict[str, frozenset[int]], token: str) -> frozenset[int]:
    """The arguments value `token` (`%x`, or result `%x#k` of a call) depends on; none for a constant."""
    if token in deps:
        return deps[token]
    return deps.get(token.split("#")[0], frozenset())


def _statements(body: list[str]):
    """The body's statements, one per line, except that an op whose regions span several lines is gathered
    into one until its braces close."""
    pending: list[str] = []
    balance = 0
    for line in body:
        if pending or (balance == 0 and line.count("(") + line.count("{") > line.count(")") + line.count("}")
                       and "({" in line):
            pending.append(line)
            balance += line.count("{") - line.count("}")
            if balance > 0:
                continue
            line, pending, balance = " ".join(pending), [], 0
        yield line
