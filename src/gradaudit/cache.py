"""--cache DIR: the reports of a model audited before, with nothing of what decides them changed, read back
instead of auditing it again (no TensorFlow import, no child process). One entry per model and options: the
run's JSON report, plus every Report field by field (wire.py) so that each format renders as the run did.

The key is a hash of the model's files (what TensorFlow's loader reads), the audit's options and the files they
name, gradaudit's version and source files, the versions of Python, TensorFlow and the packages gradaudit runs
on, the platform, the environment variables TensorFlow reads and the default memory limit. The policy (--select,
--ignore, --ignore-ops, --baseline, --fail-on) is not in it: it is applied to the reports on every run, read from
the cache or not. Not stored: a model that could not be audited, a run whose runtime brought no result (a
timeout, the memory limit, the process died), and models run with --allow-unsafe-ops that hold ops or files
not proven safe. Python targets are never cached: the code they import cannot be hashed.

An entry is signed (HMAC-SHA256 over its content) with a secret that is not in the cache folder: the environment
variable GRADAUDIT_CACHE_KEY where set (a CI secret), else a key file this user's gradaudit made once
($XDG_CONFIG_HOME/gradaudit/cache-key, mode 0600). An entry whose signature does not verify is a miss: a cache
folder restored into a checkout, or committed by a pull request, cannot make a model pass that it was not written
for by this machine (or by a run that held the secret)."""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json
import os
import secrets
import sys
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from .batch import ModelAudit
from .kinds import kind_of, named
from .model import Report
from .results import AuditOptions
from .version import __version__

ENTRY_FORMAT = 3  # what an entry holds; a change of it is a new key, so older entries are misses
SOURCE = Path(__file__).resolve().parent  # gradaudit's own files: a developer's edit is a new key
# The distributions whose code decides a report: TensorFlow under each name it is published as, Keras (Keras
# files), and what the checks, the parse and the sandbox run on
PACKAGES = ("tensorflow", "tensorflow-cpu", "tensorflow-gpu", "tensorflow-intel", "tensorflow-macos",
            "tensorflow-aarch64", "tf-nightly", "tf-nightly-cpu", "keras", "tf-keras", "numpy", "ml-dtypes",
            "protobuf", "h5py", "landlockpy")
# Environment variables TensorFlow, XLA, CUDA and the math libraries read (devices, determinism, oneDNN, threads);
# TF_CPP_* only sets the log level
ENVIRONMENT = ("TF_", "XLA_", "CUDA_", "ONEDNN_", "DNNL_", "OMP_", "MKL_", "KMP_")
QUIET_ENVIRONMENT = ("TF_CPP_",)
CACHEDIR_TAG = ("Signature: 8a477f597d28d172789f06886806bc55\n"
                "# This file is a cache directory tag created by gradaudit.\n"
                "# For information about cache directory tags, see https://bford.info/cachedir/\n")


@dataclass(frozen=True)
class Slot:
    """Where a model's entry lives (`name`: a hash of the model's path and the options) and the key it must
    hold to be this model's report now."""

    path: str  # the model as the command named it
    name: str
    key: str
    parts: dict[str, Any]


def _digest(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=repr).encode()).hexdigest()


def file_digest(path: str) -> str | None:
    """sha256 of a regular file's bytes (symlinks followed); None for anything else (a FIFO is never opened)."""
    import stat

    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return None
        h = hashlib.sha256()
        with open(path, "rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
        return h.hexdigest()
    except OSError:
        return None


def _digests(files: dict[str, str]) -> dict[str, str] | None:
    """Each file's digest by its name; None when one is not a regular file."""
    digests = {}
    for name, path in files.items():
        digest = file_digest(path)
        if digest is None:
            return None
        digests[name] = digest
    return digests


def saved_model_digest(folder: str) -> dict[str, str] | None:
    """The digests of the files of a SavedModel that TensorFlow's loader and gradaudit read
    (targets.saved_model_files); None when one is not a regular file or a folder cannot be walked safely."""
    from .targets import saved_model_files

    files = saved_model_files(folder)
    return None if files is None else _digests(files)


def source_digest(root: Path) -> str:
    """gradaudit's own files (code, templates, schema), compiled files left out."""
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        h.update(path.relative_to(root).as_posix().encode() + b"\0")
        h.update(path.read_bytes() + b"\0")
    return h.hexdigest()


def _installed(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _platform() -> list[str]:
    """The system, the machine and the kernel's release (which decides the sandbox a report describes); from
    os.uname, since the platform module may start `uname -p` for it."""
    if hasattr(os, "uname"):
        name = os.uname()
        return [sys.platform, name.sysname, name.machine, name.release]
    import platform

    return [sys.platform, platform.system(), platform.machine(), platform.release()]


def environment() -> dict[str, Any]:
    """What decides every report of this installation, whatever the model: read without importing TensorFlow."""
    from .safety.sandbox import default_memory_limit

    return {
        "format": ENTRY_FORMAT, "gradaudit": __version__, "source": source_digest(SOURCE),
        "python": [sys.version, sys.implementation.cache_tag],
        "platform": _platform(),
        "packages": {name: _installed(name) for name in PACKAGES},
        "environment": {k: v for k, v in sorted(os.environ.items())
                        if k.startswith(ENVIRONMENT) and not k.startswith(QUIET_ENVIRONMENT)},
        "memory": default_memory_limit(),  # the child's default --memory-limit, which reports show
    }


class Uncacheable(Exception):
    """Why the audits of this run cannot be cached (once for the run, on stderr)."""


def _load_ops_parts(load_ops: Sequence[str]) -> list[Any]:
    """Each --load-ops library by its bytes, each package by its distribution's version; Uncacheable for a
    package that no installed distribution ships (its code cannot be hashed)."""
    from .custom_ops import is_library

    parts: list[Any] = []
    owners = metadata.packages_distributions() if any(not is_library(s) for s in load_ops) else {}
    for spec in load_ops:
        if is_library(spec):
            parts.append([spec, file_digest(spec)])
            continue
        dists = owners.get(spec.split(".")[0])
        if not dists:
            raise Uncacheable(f"--load-ops {spec} is no installed distribution's package: its code cannot be hashed")
        parts.append([spec, {d: _installed(d) for d in sorted(dists)}])
    return parts


def options_parts(options: AuditOptions, all_signatures: bool) -> dict[str, Any]:
    """Every option of the audit, and the contents of the files they name; Uncacheable when it cannot be said."""
    return {"options": dataclasses.asdict(options), "all_signatures": all_signatures,
            "inputs": file_digest(options.inputs_file) if options.inputs_file else None,
            "load_ops": _load_ops_parts(options.load_ops)}


def model_parts(path: str) -> dict[str, Any] | None:
    """What the model is: its kind, its absolute path (reports name it) and its files' digests; None when it
    cannot be cached (a kind never cached, such as a Python target, or files that cannot be read as regular
    files: the audit says why)."""
    kind = kind_of(path)
    files = kind.files(path) if kind.files is not None else None
    content = None if files is None else _digests(files)
    return None if content is None else {"kind": kind.name, "path": os.path.abspath(path), "content": content}


def storable(reports: Sequence[Report], options: AuditOptions) -> bool:
    """A report that says only what the model, the options and this installation decide: none whose runtime
    brought no result (timeout, memory limit, a dead process), and none of a model run with --allow-unsafe-ops
    that holds what the key cannot hash (ops that read files or the network, a Keras file's Python code)."""
    from .rules import get_rule

    if not reports or any(r.runtime_stopped for r in reports):
        return False
    if not options.allow_unsafe_ops:
        return True
    if any(_runs_code(r) for r in reports):
        return False
    return not any(get_rule(f.rule).blocks_execution for r in reports for f in r.findings)


def _runs_code(report: Report) -> bool:
    kind = named(report.target.kind)
    return kind is None or kind.runs_code


def _write_atomically(path: str, text: str) -> None:
    folder = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".json")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _prepare_folder(folder: str) -> None:
    """The folder, created if missing, marked as a cache (CACHEDIR.TAG: backup tools skip it) that git ignores."""
    os.makedirs(folder, exist_ok=True)
    for name, text in (("CACHEDIR.TAG", CACHEDIR_TAG), (".gitignore", "# Created by gradaudit\n*\n")):
        if not os.path.exists(os.path.join(folder, name)):
            _write_atomically(os.path.join(folder, name), text)


KEY_VARIABLE = "GRADAUDIT_CACHE_KEY"


def signing_key() -> bytes:
    """The secret entries are signed with: GRADAUDIT_CACHE_KEY, else this user's key file, made on first use (raises
    OSError when neither exists nor can be made: nothing is cached then)."""
    given = os.environ.get(KEY_VARIABLE)
    if given:
        return given.encode()
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    path = os.path.join(base, "gradaudit", "cache-key")
    try:
        with open(path, "rb") as f:
            key = f.read()
        if len(key) >= 32:
            return key
    except FileNotFoundError:
        pass
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        key = secrets.token_hex(32).encode()
        f.write(key)
    return key


def _signature(doc: dict[str, Any], key: bytes) -> str:
    return hmac.new(key, json.dumps(doc, sort_keys=True).encode(), hashlib.sha256).hexdigest()


def _entry(reports: Sequence[Report], slot: Slot, key: bytes) -> str:
    """The run's JSON report (as --format json writes it, before the policy), with `cache`: the key, what it
    was made of, and the Reports field by field."""
    from .report import render
    from .wire import encode

    doc = json.loads(render("json", reports))
    parts = {**slot.parts, "environment": _digest(slot.parts["environment"])}  # no variable's value written
    doc["cache"] = {"format": ENTRY_FORMAT, "key": slot.key, "parts": parts, "reports": [encode(r) for r in reports]}
    doc["cache"]["signature"] = _signature(doc, key)
    return json.dumps(doc) + "\n"


def read_entry(path: str, key: str, secret: bytes) -> tuple[tuple[Report, ...], str] | None:
    """The reports of the entry at `path` and the TensorFlow version its run recorded, when it holds `key` and its
    signature is `secret`'s; None for anything else (missing, truncated, corrupt, foreign, another key, unsigned or
    signed with another secret)."""
    from .wire import WireError, decode

    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        cache, tool = doc["cache"], doc["tool"]
        if cache["format"] != ENTRY_FORMAT or cache["key"] != key or not cache["reports"]:
            return None
        signature = cache.pop("signature")
        if not isinstance(signature, str) or not hmac.compare_digest(signature, _signature(doc, secret)):
            return None
        reports = tuple(decode(Report, r, "cache") for r in cache["reports"])
        version = decode(str, tool["tensorflow"], "tool")
        return reports, version
    except (OSError, ValueError, KeyError, TypeError, IndexError, RecursionError, WireError):
        return None


class Cache:
    """One run's cache: `lookup` the models whose reports are stored, `store` the audits of the others. Every
    problem is a miss or one line through `say`, never an error: the audit goes on without the cache."""

    def __init__(self, folder: str, options: AuditOptions, all_signatures: bool, say: Callable[[str], None]):
        self.folder, self.options, self.say = folder, options, say
        self._slots: dict[str, Slot] = {}  # the key of each model as it was before its audit
        self._hits: set[str] = set()
        self._said: set[str] = set()
        self._common: dict[str, Any] | None = None
        self._secret = b""
        try:
            self._common = {**environment(), **options_parts(options, all_signatures)}
            self._secret = signing_key()
        except (Uncacheable, OSError) as exc:
            self._common = None
            self._once(f"gradaudit: --cache: nothing is cached: {exc}")

    def _once(self, line: str) -> None:
        if line not in self._said:
            self._said.add(line)
            self.say(line)

    def slot(self, path: str) -> Slot | None:
        """The entry of `path` and the key it must hold now; None when it cannot be cached."""
        if self._common is None:
            return None
        model = model_parts(path)
        if model is None:
            uncached = kind_of(path).uncached
            if uncached:
                self._once(f"gradaudit: --cache: {uncached}")
            return None
        name = _digest({"model": model["path"], "kind": model["kind"], "options": self._common["options"],
                        "all_signatures": self._common["all_signatures"]})[:32]
        parts = {**self._common, "model": model}
        return Slot(path, name, _digest(parts), parts)

    def _entry_path(self, slot: Slot) -> str:
        return os.path.join(self.folder, f"{slot.name}.json")

    def lookup(self, paths: Sequence[str]) -> dict[str, ModelAudit]:
        """The stored audits of `paths` (by path) whose keys still hold; one line says which came from here."""
        from .report.common import printable
        from .report.json_report import record_tensorflow_version

        found: dict[str, ModelAudit] = {}
        for path in paths:
            slot = self.slot(path)
            if slot is None:
                continue
            self._slots[path] = slot
            entry = read_entry(self._entry_path(slot), slot.key, self._secret)
            if entry is not None:
                found[path] = ModelAudit(path, entry[0])
                record_tensorflow_version(entry[1])
        self._hits = set(found)
        where = printable(self.folder)
        if len(found) == 1 and len(paths) == 1:
            self.say(f"gradaudit: report from cache {where} (key {self._slots[paths[0]].key[:12]})")
        elif found:
            self.say(f"gradaudit: reports of {len(found)} of {len(paths)} models from cache {where}")
        return found

    def store(self, audits: Iterable[ModelAudit]) -> None:
        """Write an entry for each audit `lookup` did not find whose report can be kept, when its model's files
        are still those its key was made of (a model changed while it was audited is not stored)."""
        for audit in audits:
            before = self._slots.get(audit.path)
            if before is None or audit.path in self._hits or audit.failure is not None:
                continue
            if not storable(audit.reports, self.options) or not self._outside_model(audit.path):
                continue
            after = self.slot(audit.path)
            if after is None or after.key != before.key:
                continue
            if not self._write(after, audit.reports):
                return

    def _outside_model(self, path: str) -> bool:
        """Never into a model's folder: a cache folder inside a SavedModel's is not written."""
        from .report.common import printable

        if not os.path.isdir(path):
            return True
        model, folder = os.path.realpath(path), os.path.realpath(self.folder)
        if os.path.commonpath([model, folder]) != model:
            return True
        self._once(f"gradaudit: warning: --cache {printable(self.folder)} is inside the model {printable(path)}: "
                   "nothing is written there")
        return False

    def _write(self, slot: Slot, reports: Sequence[Report]) -> bool:
        from .report.common import printable

        try:
            _prepare_folder(self.folder)
            _write_atomically(self._entry_path(slot), _entry(reports, slot, self._secret))
        except OSError as exc:
            self._once(f"gradaudit: warning: cannot write the cache {printable(self.folder)}: "
                       f"{exc.strerror or exc}; the reports are not cached")
            return False
        return True
