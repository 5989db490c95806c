"""The point where gradients are checked: signature inputs synthesised from their specs, or read from --inputs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import numpy as np

from .domains import COUNT_HIGH, Domains


class InputError(ValueError):
    """An input cannot be built (unknown rank, shape mismatch, bad --inputs file)."""


class PointOptions(Protocol):
    """What the synthesised point is made from (NumericOptions and AuditOptions have these fields)."""

    @property
    def seed(self) -> int: ...
    @property
    def batch_size(self) -> int: ...
    @property
    def dim(self) -> int: ...  # unknown non-batch dimensions
    @property
    def shapes(self) -> Mapping[str, tuple[int, ...]]: ...  # --shape NAME=D0,D1
    @property
    def inputs_file(self) -> str | None: ...  # --inputs FILE.npz


def _shape(name: str, spec: Any, batch_size: int, dim: int,
           shapes: Mapping[str, tuple[int, ...]]) -> tuple[int, ...]:
    known = spec.shape.as_list() if spec.shape.rank is not None else None
    if name in shapes:
        wanted = tuple(int(d) for d in shapes[name])
        if known is not None and (len(known) != len(wanted) or any(
                k is not None and k != w for k, w in zip(known, wanted))):
            raise InputError(f"--shape {name}={','.join(map(str, wanted))} does not fit the "
                             f"signature shape {known}")
        return wanted
    if known is None:
        raise InputError(f"input {name!r} has unknown rank: pass --shape {name}=D0,D1,... or --inputs")
    return tuple(d if d is not None else (batch_size if i == 0 else dim) for i, d in enumerate(known))


def _distribution(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Rows (last axis) of positive multiples of 1/n, n a power of two, summing to exactly 1 in any float
    precision: a float32 row that sums to 1 only up to rounding is not a distribution in the float64 copy,
    and the registered gradient of a softmax cross-entropy then differs from its derivative by that much."""
    classes = shape[-1]
    n = 1 << max(3, int(np.ceil(np.log2(4 * max(classes, 1)))))
    rows = int(np.prod(shape[:-1], dtype=np.int64))
    out = np.empty((rows, classes))
    for r in range(rows):
        cuts = np.sort(rng.choice(np.arange(1, n), size=classes - 1, replace=False))
        out[r] = np.diff(np.concatenate([[0], cuts, [n]])) / n
    return out.reshape(shape)


def _read(inputs_file: str | None) -> dict[str, np.ndarray]:
    if not inputs_file:
        return {}
    try:
        with np.load(inputs_file, allow_pickle=False) as data:
            return {k: data[k] for k in data.files}
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read --inputs {inputs_file}: {exc}") from exc


def given_inputs(inputs_file: str | None) -> frozenset[str]:
    """The inputs the user gave real values for (their domains are the user's, not inferred)."""
    return frozenset(_read(inputs_file))


def synthesise(specs: Mapping[str, Any], options: PointOptions, domains: Domains | None = None
               ) -> dict[str, np.ndarray]:
    """One array per signature input, in the input's own dtype.

    Floats are N(0, 1) (seeded), class-probability labels (`domains`) non-negative rows summing to 1;
    integers are token ids in [1, vocabulary) where the graph tells the table they index, with a little
    padding (0) only where a mask reads them, 0 where they index a table of unknown size, else small
    positive integers; bools False, strings empty. Arrays from `inputs_file` (an .npz keyed by signature
    input name) take precedence, and their first dimension is the batch size of the others. The seed, batch
    size, unknown dimensions, --shape and --inputs are `options`'.
    """
    inputs_file, shapes, dim = options.inputs_file, options.shapes, options.dim
    domains = domains or Domains()
    given = _read(inputs_file)
    if inputs_file:
        unknown = sorted(set(given) - set(specs))
        if unknown:
            raise InputError(f"--inputs {inputs_file} has arrays {unknown} that are not signature "
                             f"inputs ({sorted(specs)})")
    # Real examples set the batch size of the inputs synthesised next to them.
    batch_size = next((int(np.shape(v)[0]) for v in given.values() if np.ndim(v)), options.batch_size)
    rng = np.random.default_rng(options.seed)
    arrays: dict[str, np.ndarray] = {}
    for name in sorted(specs):
        spec = specs[name]
        if name in given:
            value = np.asarray(given[name])
            if spec.shape.rank is not None and not spec.shape.is_compatible_with(value.shape):
                raise InputError(f"--inputs array {name!r} has shape {list(value.shape)}, the signature "
                                 f"wants {spec.shape.as_list()}")
            arrays[name] = value.astype(spec.dtype.as_numpy_dtype)
            continue
        domain = domains.inputs.get(name)
        shape = _shape(name, spec, batch_size, dim, shapes)
        if domain is not None and domain.kind == "splits" and name not in shapes:
            shape = _splits_shape(spec, shape, batch_size)
        arrays[name] = _synthesised(spec, shape, domain, rng)
    return arrays


def absolute_point(point: Mapping[str, np.ndarray], sources, given: frozenset[str], domains: Domains
                   ) -> tuple[dict[str, np.ndarray], list[str]]:
    """`point` with the float sources that were synthesised as N(0, 1) (not given with --inputs, no known domain)
    at their absolute values, and their names: where the synthesised point is outside the model's domain (a
    square root, the log-density of a positive distribution), the checks and the probes start from there."""
    flipped = [n for n in sources if n not in given and n not in domains.inputs]
    return {k: (np.abs(np.asarray(v)) if k in flipped else v) for k, v in point.items()}, flipped


def _splits_shape(spec, shape: tuple[int, ...], batch_size: int) -> tuple[int, ...]:
    """A ragged tensor's row splits of unknown length: one more than the batch, for values of a batch of rows."""
    if spec.shape.rank == 1 and spec.shape[0] is None:
        return (batch_size + 1,)
    return shape


def _synthesised(spec, shape: tuple[int, ...], domain, rng: np.random.Generator) -> np.ndarray:
    """One synthesised input of `shape` in the dtype of `spec`, for what `domain` says it is made for."""
    np_dtype = spec.dtype.as_numpy_dtype
    if spec.dtype.is_floating or spec.dtype.is_complex:
        if domain is not None and domain.kind == "distribution" and len(shape) >= 1:
            return _distribution(rng, shape).astype(np_dtype)
        return rng.standard_normal(shape).astype(np_dtype)
    if spec.dtype.is_bool:
        return np.zeros(shape, dtype=bool)
    if spec.dtype.name == "string":
        return np.full(shape, b"", dtype=object)
    if spec.dtype.is_integer and domain is not None:
        return _integers(domain, shape, rng, np_dtype)
    return np.zeros(shape, dtype=np_dtype)


def _distinct(domain, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Indices no two of which are equal (rows a scatter update writes), in [1, high) for token ids, in [0, high)
    otherwise, or the smallest such values when the table's size is unknown; with replacement only where the
    table has fewer rows than the indices asked for (the model cannot be given distinct ones then)."""
    size = int(np.prod(shape, dtype=np.int64))
    low = 1 if domain.kind in ("ids", "count") else 0
    high = domain.high if domain.high else low + size
    if high - low < size:
        return rng.integers(low, max(high, low + 1), size=shape)
    return rng.permutation(np.arange(low, high))[:size].reshape(shape)


def _integers(domain, shape: tuple[int, ...], rng: np.random.Generator, np_dtype) -> np.ndarray:
    """An integer input for its domain: class labels, lengths and positions, segment ids, token ids and counts;
    zeros for an index into a table of unknown size."""
    if domain.kind == "classes" and domain.high:
        return rng.integers(0, domain.high, size=shape).astype(np_dtype)
    if domain.kind in ("length", "position"):
        return np.full(shape, min(1, (domain.high or 2) - 1), dtype=np_dtype)
    if domain.kind == "splits" and len(shape) == 1:  # one value a row: 0, 1, ..., the values' rows (_splits_shape)
        return np.arange(shape[0]).astype(np_dtype)
    if domain.distinct is not None:
        return _distinct(domain, shape, rng).astype(np_dtype)
    if domain.kind in ("segments", "partitions"):
        return (rng.integers(0, domain.high, size=shape) if domain.high
                else np.zeros(shape, dtype=np.int64)).astype(np_dtype)
    if domain.kind != "index":
        high = domain.high if domain.kind == "ids" and domain.high else COUNT_HIGH
        ids = rng.integers(1, max(high, 2), size=shape)
        if domain.padded and len(shape) >= 2 and shape[-1] > 1:
            ids[1::2, ..., -1] = 0  # every other example ends with one padding position
        return ids.astype(np_dtype)
    return np.zeros(shape, dtype=np_dtype)


def synthesised_notes(specs: Mapping[str, Any], options: PointOptions, domains: Domains | None) -> list[str]:
    """One note per integer input synthesised for the domain the graph tells (token ids, labels, segment ids,
    indices): the values the checks decided at, and for rows a scatter update writes, what distinct rows leave
    unchecked."""
    if domains is None:
        return []
    given = given_inputs(options.inputs_file)
    notes = []
    for name in sorted(specs):
        domain = domains.inputs.get(name)
        if name in given or domain is None or not specs[name].dtype.is_integer:
            continue
        if domain.distinct is None:
            notes.append(f"Input {name} was synthesised as {domain.describe()}.")
            continue
        low = 1 if domain.kind in ("ids", "count") else 0
        within = f" in [{low}, {domain.high})" if domain.high else ""
        notes.append(f"Input {name} was synthesised as distinct rows{within}, the rows {domain.distinct.label} "
                     "writes: where two rows repeat, its forward keeps one update while TensorFlow's gradient gives "
                     f"each its part, so the gradient there is not the derivative and was not checked; give {name} "
                     "as the model gets it with --inputs.")
    return notes
