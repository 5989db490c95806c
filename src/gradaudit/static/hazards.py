"""GA30x detection: numerically unstable patterns in the audited graph and in the saved custom-gradient
functions it uses (the probes confirm or clear them); GA310-GA321 come from the runtime stages."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..model import Finding, OpRef
from ..rules.base import Rule
from ..rules.hazards import (
    Log1pExp,
    LogSigmoid,
    LogSoftmax,
    SqrtAtZero,
    SquaredDenominator,
    WhereNan,
)


@dataclass(frozen=True)
class Hazard:
    """A matched pattern: the finding it gives, and every op a probe may name when it goes wrong there."""

    rule: Rule
    op: OpRef
    involved: frozenset[OpRef]
    message: str
    sources: tuple[str, ...]
    outputs: tuple[str, ...]
    fix: str | None = None  # the rule's own fix where None; one for this form of the pattern otherwise

    def finding(self) -> Finding:
        return self.rule.finding(self.message, op=self.op, sources=self.sources, outputs=self.outputs, fix=self.fix)


def check(analysis) -> list[Finding]:
    """Static GA3xx findings from a finished StaticAnalysis."""
    return [h.finding() for h in hazards_of(analysis)]


def hazards_of(analysis) -> list[Hazard]:
    """find_hazards once per analysis: the static rules and the stability probes (in the child too, which
    receives the analysis with them) read the same list."""
    found = analysis.__dict__.get("_hazards")
    if found is None:
        found = analysis.__dict__["_hazards"] = find_hazards(analysis)
    return list(found)


def find_hazards(analysis) -> list[Hazard]:
    """Every hazard pattern in the audited graph and in the saved custom-gradient functions it uses."""
    from ..graph.dataflow import VALUE
    from ..graph.reach import forward_masks

    g = analysis.graph
    main = _View(g, varies=lambda t: analysis.reach_grad[t] != 0,
                 on_path=lambda n: any(analysis.reach_grad[t] for t, _ in n.inputs)
                 and any(analysis.to_output_grad[o] for o in n.outputs))

    def pair(node) -> tuple[list[str], list[str]]:
        src = out = 0
        for t, _ in node.inputs:
            src |= analysis.reach_grad[t]
        for o in node.outputs:
            out |= analysis.to_output_grad[o]
        return analysis.source_names(src), analysis.output_names(out)

    hazards = []
    for node in g.ops.values():
        for rule_, op, involved, message, *fix in _match(main, node):
            srcs, outs = pair(node)
            hazards.append(Hazard(rule_, op, frozenset(involved), message, tuple(srcs), tuple(outs),
                                  next(iter(fix), None)))

    # Saved custom-gradient functions: only squared-denominator applies (their values are gradients).
    users: dict[str, list] = {}
    for node in g.ops.values():
        fn = analysis.gradient_functions.get(node.custom_gradient or "")
        if fn in g.gradient_graphs and main.on_path(node):
            users.setdefault(fn, []).append(node)
    for fn, nodes in sorted(users.items()):
        gg = g.gradient_graphs[fn]
        args = {t: 1 for t in range(len(gg.dtype))
                if t not in gg.ops and t not in gg.producer and t not in gg.aliased_from}
        masks = forward_masks(gg, args, VALUE)
        view = _View(gg, varies=lambda t, m=masks: m[t] != 0, on_path=lambda n: True)
        user_srcs: set[str] = set()
        user_outs: set[str] = set()
        for n in nodes:
            s, o = pair(n)
            user_srcs.update(s)
            user_outs.update(o)
        refs = {n.ref for n in nodes}
        users_text = ", ".join(sorted(f"{r.op_type} '{r.op_name}' in {r.function}" for r in refs))
        found = [(rule_, op, involved, message) for node in gg.ops.values()
                 for rule_, op, involved, message in _squared_denominator(view, node)]
        hazards += _folded(found, fn, refs, users_text, tuple(sorted(user_srcs)), tuple(sorted(user_outs)))
    return hazards


def _folded(found, fn: str, refs: set, users_text: str, srcs: tuple[str, ...], outs: tuple[str, ...]) -> list[Hazard]:
    """The patterns of one saved gradient function: one hazard each when it holds one, else one per rule that
    names how many and the first, and involves every op (a library's own gradient code, such as TensorFlow
    Probability's betainc, holds dozens: one line per function, not a wall). A probe that sees any of them fail
    confirms the line."""
    by_rule: dict[str, list] = {}
    for item in found:
        by_rule.setdefault(item[0].code, []).append(item)
    out = []
    for items in by_rule.values():
        rule_, op, _, message = items[0]
        involved = frozenset(refs).union(*(i[2] for i in items))
        if len(items) > 1:
            message = (f"{len(items)} {rule_.slug} patterns in the saved gradient function {fn}, the first: "
                       f"{message}")
        out.append(Hazard(rule_, op, involved, f"{message}, in the custom gradient of {users_text}", srcs, outs))
    return out


# Ops that pass a value on unchanged (or only reshaped): looked through when matching patterns.
_PASS = {"Identity", "Snapshot", "EnsureShape", "Reshape", "ExpandDims", "Squeeze"}
_ADD = {"Add", "AddV2"}
_SELECT = {"Select", "SelectV2"}
_DIV = {"RealDiv", "Div"}
# Op type -> the input at which it is non-finite or has an infinite derivative (log(0), 1/0), for the ops
# whose registered gradient turns a zero incoming gradient into NaN there (0 * inf). Sqrt, Rsqrt,
# Reciprocal and Inv are not among them: their gradient kernels (SqrtGrad, ...) return 0 for a zero
# incoming gradient in TF 2.21, so `tf.where(x > 0, tf.sqrt(x), 0)` has a finite gradient at 0.
# tests/rules/test_hazards.py checks this table against the installed TensorFlow.
_SINGULAR = {"Log": 0, "Log1p": 0, "RealDiv": 1, "Div": 1, "Pow": 0}
# Elementwise ops through which the unselected branch's NaN gradient still flows back.
_CARRY = {"Mul", "Add", "AddV2", "Sub", "Neg", "Cast", "RealDiv", "Div", "Square", "Exp"} | _PASS
_WALK_LIMIT = 48


class _View:
    """One Dataflow (the audited graph or a custom-gradient function) with the lookups the patterns need."""

    def __init__(self, g, varies, on_path):
        self.g = g
        self.varies = varies  # tensor -> does it change with a source (or a function argument)
        self.on_path = on_path  # op node -> is it between a source and an output on a gradient path

    def root(self, t: int) -> int:
        """`t` with call boundaries and value-preserving ops peeled off, to compare tensors."""
        for _ in range(_WALK_LIMIT):
            src = self.g.aliased_from.get(t)
            if src and len(src) == 1:
                t = src[0]
                continue
            ps = self.g.producers(t)
            node = self.g.ops[ps[0]] if len(ps) == 1 else None
            if node is None or node.ref.op_type not in _PASS or not node.inputs:
                return t
            t = node.inputs[0][0]
        return t

    def producer(self, t: int):
        """The op computing `t`, looking through calls and value-preserving ops; None if not one op."""
        ps = self.g.producers(self.root(t))
        return self.g.ops[ps[0]] if len(ps) == 1 else None

    def const(self, t: int) -> float | None:
        node = self.producer(t)
        if node is None or node.ref.op_type != "Const":
            return None
        return self.g.const_value.get(node.outputs[0])

    def depends_on(self, t: int, target: int) -> bool:
        """Whether the value of `t` is computed from `target` (a bounded walk upstream)."""
        target = self.root(target)
        seen: set[int] = set()
        stack = [t]
        while stack and len(seen) < _WALK_LIMIT * 4:
            x = self.root(stack.pop())
            if x == target:
                return True
            if x in seen:
                continue
            seen.add(x)
            for p in self.g.producers(x):
                stack.extend(i for i, _ in self.g.ops[p].inputs)
        return False

    def float_dtype(self, t: int):
        """numpy's finfo of a float tensor's dtype, None for other dtypes."""
        import numpy as np
        from tensorflow.python.framework import dtypes

        try:
            dt = dtypes.as_dtype(self.g.dtype[t])
        except TypeError:
            return None
        return np.finfo(dt.as_numpy_dtype) if dt.is_floating else None


def _match(v: _View, node) -> list:
    t = node.ref.op_type
    if t in ("Log", "Log1p"):
        return _log_patterns(v, node)
    if t in ("Sqrt", "Pow"):
        return _sqrt_at_zero(v, node)
    if t in _SELECT:
        return _where_nan(v, node)
    if t in _DIV or t == "Mul":
        return _squared_denominator(v, node)
    return []


def _log_patterns(v: _View, log) -> list:
    if not v.on_path(log):
        return []
    arg = v.producer(log.inputs[0][0])
    if arg is None:
        return []
    a = arg.ref.op_type
    if log.ref.op_type == "Log1p" and a == "Exp":
        return [] if _nonpositive(v, arg.inputs[0][0]) else [_log1p_exp(v, log, arg, None)]
    if log.ref.op_type != "Log":
        return []
    if a == "Sigmoid":
        return [(LogSigmoid, log.ref, {log.ref, arg.ref},
                 f"{log.ref.label} takes the log of {arg.ref.label}: sigmoid underflows to 0 for very "
                 "negative inputs (below about -87 in float32), where the value is -inf and the gradient NaN")]
    if a == "Softmax":
        return [(LogSoftmax, log.ref, {log.ref, arg.ref},
                 f"{log.ref.label} takes the log of {arg.ref.label}: softmax entries underflow to 0 when "
                 "the logits are spread (by more than about 87 in float32), where the gradient is NaN")]
    found = _one_plus_exp(v, arg)
    if found is not None:
        return [] if _nonpositive(v, found.inputs[0][0]) else [_log1p_exp(v, log, found, arg)]
    # a sigmoid written by hand: log(1 / (1 + exp(-x))), log(reciprocal(1 + exp(-x)))
    denominator = None
    if a in _DIV and len(arg.inputs) == 2 and v.const(arg.inputs[0][0]) == 1.0:
        denominator = v.producer(arg.inputs[1][0])
    elif a in ("Reciprocal", "Inv") and arg.inputs:
        denominator = v.producer(arg.inputs[0][0])
    exp = _one_plus_exp(v, denominator)
    if exp is not None and denominator is not None:
        return [(LogSigmoid, log.ref, {log.ref, arg.ref, denominator.ref, exp.ref},
                 f"{log.ref.label} takes the log of 1 / (1 + exp(.)) ({arg.ref.label}), a sigmoid written by hand: "
                 f"{exp.ref.label} overflows to inf for very negative inputs of the sigmoid, where the value is "
                 "-inf and the gradient NaN")]
    return []


# Ops whose result is never negative: minus one of them is never positive.
_NEVER_NEGATIVE = frozenset({"Abs", "Relu", "Relu6", "Square", "Exp", "Softplus", "Sqrt", "Sigmoid"})


def _nonpositive(v: _View, t: int, depth: int = 0) -> bool:
    """`t` is never positive by its form: minus a non-negative value (-|x|, as the stable softplus and TensorFlow's
    own sigmoid cross-entropy write exp(-|x|)), a non-positive constant, or a minimum with one. exp of it never
    overflows, so log(1 + exp(.)) of it is the stable form, not the hazard."""
    node = v.producer(t)
    if node is None or depth > 4:
        return False
    op = node.ref.op_type
    if op == "Const":
        value = v.const(t)
        return value is not None and value <= 0.0
    if op == "Neg" and node.inputs:
        inner = v.producer(node.inputs[0][0])
        return inner is not None and inner.ref.op_type in _NEVER_NEGATIVE
    if op in ("Select", "SelectV2") and len(node.inputs) == 3:
        return _minus_abs(v, node)
    if op in ("Minimum",) and len(node.inputs) == 2:
        return any(_nonpositive(v, i, depth + 1) for i, _ in node.inputs)
    if op == "Mul" and len(node.inputs) == 2:  # a non-positive constant times a non-negative value
        for k in (0, 1):
            c, other = v.const(node.inputs[k][0]), v.producer(node.inputs[1 - k][0])
            if c is not None and c <= 0.0 and other is not None and other.ref.op_type in _NEVER_NEGATIVE:
                return True
    return False


def _minus_abs(v: _View, select) -> bool:
    """select(x >= 0, -x, x) or select(x < 0, x, -x): -|x|, as tf.nn.sigmoid_cross_entropy_with_logits writes it."""
    cond = v.producer(select.inputs[0][0])
    if cond is None or len(cond.inputs) != 2:
        return False
    x, zero = cond.inputs[0][0], v.producer(cond.inputs[1][0])
    if zero is None or not (zero.ref.op_type == "ZerosLike" or v.const(cond.inputs[1][0]) == 0.0):
        return False
    t, f = v.root(select.inputs[1][0]), v.root(select.inputs[2][0])

    def negated(a: int) -> bool:
        node = v.producer(a)
        return node is not None and node.ref.op_type == "Neg" and v.root(node.inputs[0][0]) == v.root(x)

    if cond.ref.op_type in ("GreaterEqual", "Greater"):
        return negated(t) and f == v.root(x)
    if cond.ref.op_type in ("LessEqual", "Less"):
        return t == v.root(x) and negated(f)
    return False


def _one_plus_exp(v: _View, node):
    """The Exp node when `node` is 1 + exp(.), else None."""
    if node is None or node.ref.op_type not in _ADD or len(node.inputs) != 2:
        return None
    for i in (0, 1):
        exp = v.producer(node.inputs[i][0])
        if exp is not None and exp.ref.op_type == "Exp" and v.const(node.inputs[1 - i][0]) == 1.0:
            return exp
    return None


def _log1p_exp(v: _View, log, exp, add):
    finfo = v.float_dtype(exp.outputs[0])
    limit = f" (x > {math.log(float(finfo.max)):.1f} in {finfo.dtype})" if finfo else ""
    involved = {log.ref, exp.ref} | ({add.ref} if add is not None else set())
    return (Log1pExp, log.ref, involved,
            f"{log.ref.label} computes log(1 + exp(x)) with {exp.ref.label}: exp overflows to inf{limit}, "
            "so the value is inf and the gradient NaN where the true result is about x")


_NONNEGATIVE = {"Square": "a square", "SquaredDifference": "a square", "Abs": "an absolute value",
                "Relu": "a ReLU"}
_REDUCE = {"Sum", "Mean", "Max"}


def _zero_at_ordinary_inputs(v: _View, t: int, depth: int = 0) -> str | None:
    """What makes `t` zero at ordinary inputs ("a sum of squares"), or None when nothing obvious does.
    A positive constant added anywhere (an epsilon) makes it None."""
    node = v.producer(t)
    if node is None or depth > 4 or not v.varies(t):
        return None
    op = node.ref.op_type
    if op in _NONNEGATIVE:
        return _NONNEGATIVE[op]
    if (op == "Mul" and len(node.inputs) == 2 and v.root(node.inputs[0][0]) == v.root(node.inputs[1][0])
            or op == "Pow" and v.const(node.inputs[1][0]) == 2.0):
        return "a square"
    terms = node.inputs[:1] if op in _REDUCE else node.inputs if op in _ADD or op == "AddN" else []
    parts = [_zero_at_ordinary_inputs(v, i, depth + 1) for i, _ in terms]
    found = [p for p in parts if p]
    if not parts or len(found) < len(parts):
        return None
    squares = all(p.endswith(("square", "squares")) for p in found)
    return "a sum of squares" if squares else "a sum of non-negative terms"


def _sqrt_at_zero(v: _View, node) -> list:
    if not v.on_path(node):
        return []
    if node.ref.op_type == "Pow":
        p = v.const(node.inputs[1][0])
        if p is None or not 0.0 < p < 1.0:
            return []
    what = _zero_at_ordinary_inputs(v, node.inputs[0][0])
    if what is None:
        return []
    arg = v.producer(node.inputs[0][0])
    name = "sqrt" if node.ref.op_type == "Sqrt" else "a fractional power"
    found = (SqrtAtZero, node.ref, {node.ref}, f"{node.ref.label} takes {name} of {what} ({arg.ref.label}) "
             "with no epsilon: where it is 0 the value is finite but the gradient is inf or NaN")
    # the root of a mean of squares is a standard deviation or an RMS (tf.math.reduce_std, tf.nn.moments): its fix
    # keeps the mean, not a norm's sum
    return [(*found, _STD_FIX) if arg.ref.op_type == "Mean" else found]


_STD_FIX = ("std = tf.sqrt(tf.math.reduce_variance(x, axis=-1) + 1e-12)   # instead of tf.math.reduce_std(x, -1); "
            "an RMS likewise: tf.sqrt(tf.reduce_mean(x * x, -1) + 1e-12)")


def _where_nan(v: _View, select) -> list:
    if not v.on_path(select) or len(select.inputs) != 3:
        return []
    cond = select.inputs[0][0]
    out = []
    for branch in (1, 2):
        seen, stack = set(), [(select.inputs[branch][0], 0)]
        while stack:
            t, depth = stack.pop()
            node = v.producer(t)
            if node is None or id(node) in seen or depth > 3:
                continue
            seen.add(id(node))
            op = node.ref.op_type
            k = _SINGULAR.get(op)
            if k is not None and k < len(node.inputs):
                bad = node.inputs[k][0]
                exempt = op == "Pow" and (v.const(node.inputs[1][0]) or 0) >= 1
                if not exempt and v.varies(bad) and (v.depends_on(cond, bad) or v.depends_on(cond, _shifted(v, bad))):
                    side = "true" if branch == 1 else "false"
                    out.append((WhereNan, select.ref, {select.ref, node.ref},
                                f"{select.ref.label} computes {node.ref.label} in its {side} branch, and "
                                "its condition tests the value that op is non-finite at: where that branch is "
                                "not selected the forward is finite, but 0 * inf = NaN still flows back "
                                "through the gradient", _where_fix(op, side)))
                    break
            if op in _CARRY:
                stack.extend((i, depth + 1) for i, _ in node.inputs)
    return out


# What the double where feeds the guarded op where its branch is not selected: (its argument, a value at which
# the op is finite, the op computed on the safe argument).
_SAFE_ARGUMENT = {
    "Log": ("x", "1.0", "tf.math.log(safe)"),
    "Log1p": ("x", "0.0", "tf.math.log1p(safe)"),
    "RealDiv": ("d", "1.0", "n / safe"),
    "Div": ("d", "1.0", "n / safe"),
    "Pow": ("x", "1.0", "tf.pow(safe, p)"),
}


def _where_fix(op: str, side: str) -> str:
    """GA305's fix for this guarded op: its argument replaced by a safe value where its branch is not selected,
    the op computed on that safe argument (a double where); for a division tf.math.divide_no_nan also does."""
    arg, value, call = _SAFE_ARGUMENT[op]
    if side == "true":
        code = f"safe = tf.where(cond, {arg}, {value}); y = tf.where(cond, {call}, ...)"
    else:
        code = f"safe = tf.where(cond, {value}, {arg}); y = tf.where(cond, ..., {call})"
    fix = (f"give {op} a safe argument where its branch is not selected (a double where; {arg} is what {op} "
           f"reads): {code}")
    if op in ("RealDiv", "Div"):
        fix += "; or tf.math.divide_no_nan(n, d), whose gradient is 0 where d is 0"
    return fix


_SHIFTS = {"Sub", "Add", "AddV2", "Mul", "RealDiv", "Neg", "BiasAdd"}


def _shifted(v: _View, t: int) -> int:
    """The tensor `t` is an affine function of (x - 1, 2 * x, -x: one varying operand and constants), at most three
    steps up: a condition that tests x guards log(x - 1) as it guards log(x)."""
    for _ in range(3):
        node = v.producer(t)
        if node is None or node.ref.op_type not in _SHIFTS:
            return t
        varying = [i for i, _ in node.inputs if v.const(i) is None]
        if len(varying) != 1:
            return t
        t = varying[0]
    return t


def _squared_denominator(v: _View, node) -> list:
    if not v.on_path(node) or len(node.inputs) != 2:
        return []
    op = node.ref.op_type
    if op in _DIV:
        base = _square_base(v, node.inputs[1][0])
        if base is not None and v.varies(base[0]) and not _away_from_zero(v, base[0]):
            what = "a sum of squares" if base[1].ref.op_type == "Sum" else "a square"
            return [(SquaredDenominator, node.ref, {node.ref, base[1].ref},
                     f"{node.ref.label} divides by {base[1].ref.label}, {what}: it underflows to 0 (or "
                     "overflows) while the quotient is still representable")]
        return []
    for i in (0, 1):
        rec = v.producer(node.inputs[i][0])
        if rec is not None and rec.ref.op_type in ("Reciprocal", "Inv") and v.varies(rec.inputs[0][0]):
            return [(SquaredDenominator, node.ref, {node.ref, rec.ref},
                     f"{node.ref.label} multiplies by {rec.ref.label}: the gradient of reciprocal(b) is "
                     "-dy / b**2 computed as -dy * (1/b)**2, which overflows for tiny b although the true "
                     "gradient is representable")]
    return []


def _away_from_zero(v: _View, t: int) -> bool:
    """`t` is at least a positive constant by its form: c + a non-negative value ((1 + |h|)**2 cannot underflow),
    or a maximum with a positive constant."""
    node = v.producer(t)
    if node is None or len(node.inputs) != 2:
        return False
    if node.ref.op_type in _ADD:
        for k in (0, 1):
            c, other = v.const(node.inputs[k][0]), v.producer(node.inputs[1 - k][0])
            if c is not None and c > 0.0 and other is not None and other.ref.op_type in _NEVER_NEGATIVE:
                return True
    if node.ref.op_type == "Maximum":
        return any((c := v.const(i)) is not None and c > 0.0 for i, _ in node.inputs)
    return False


def _square_base(v: _View, t: int, depth: int = 0):
    """(b, the squaring op) when `t` is b**2, b*b or square(b), possibly times constants; (b, the Sum) when it is
    a sum of such squares (h / reduce_sum(h * h))."""
    node = v.producer(t)
    if node is None or depth > 2:
        return None
    op = node.ref.op_type
    if op == "Sum" and node.inputs:
        inner = _square_base(v, node.inputs[0][0], depth + 1)
        return (inner[0], node) if inner is not None else None
    if op == "Square" or op == "Pow" and v.const(node.inputs[1][0]) == 2.0:
        return node.inputs[0][0], node
    if op == "Mul" and len(node.inputs) == 2:
        a, b = node.inputs[0][0], node.inputs[1][0]
        if v.root(_unscaled(v, a)) == v.root(_unscaled(v, b)):
            return _unscaled(v, a), node
        for x, y in ((a, b), (b, a)):
            if v.const(x) is not None:
                return _square_base(v, y, depth + 1)
    return None


def _unscaled(v: _View, t: int) -> int:
    """`t` without constant factors: x for 2 * x."""
    for _ in range(4):
        node = v.producer(t)
        if node is None or node.ref.op_type != "Mul" or len(node.inputs) != 2:
            return t
        consts = [v.const(i) is not None for i, _ in node.inputs]
        if consts.count(True) != 1:
            return t
        t = node.inputs[consts.index(False)][0]
    return t
