"""Byte budgets for what gradaudit reads before anything runs: regular files only, under a cap, and `--inputs`
archives whose arrays, once decompressed, fit in a cap. A refusal is the input's fault (exit 2)."""

from __future__ import annotations

import os
import stat
import zipfile

from ..errors import GradauditError
from ..graph.library import MAX_COUNT_ATTR

MAX_GRAPH_BYTES = 1 << 30  # saved_model.pb; protobuf itself stops at 2 GiB
# saved_model.pbtxt: Python's text_format parses 0.3-0.5 s/MB of a real graph's text here (Keras ResNet50: 7.5 MB
# of text, 3.9 s) and up to 2.5 s/MB of text made of tiny fields (`i: 1 i: 1 ...`): 16 MiB parses in at most
# about 40 s, and admits a text graph twice ResNet50's
MAX_TEXT_GRAPH_BYTES = 16 << 20
MAX_INPUT_BYTES = 256 << 20  # --inputs, decompressed: gradient checks use small batches
# messages saved_model.pb may parse into, counted before it is parsed (safety/protoscan.py); the static pass
# then analyses at most graph/dataflow.py's MAX_STATIC_NODES of them. Each costs some 100-250 bytes parsed
# however few bytes it takes in the file (20 MB of empty NodeDefs: 10 million messages, +1.1 GB); Keras
# ResNet50 has 104,233
MAX_PARSED_MESSAGES = 5_000_000


def _regular(path: str, what: str) -> int:
    """The size of `path`, refusing what is not a regular file (a FIFO or device would block or never end)."""
    try:
        st = os.stat(path)
    except OSError as exc:
        raise GradauditError(f"{path}: cannot read {what}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(st.st_mode):
        raise GradauditError(f"{path}: {what} is not a regular file (a FIFO, device or socket); not opened")
    return st.st_size


def read_capped(path: str, what: str, cap: int = MAX_GRAPH_BYTES) -> bytes:
    """The bytes of a regular file of at most `cap` bytes. The file is opened without blocking and checked
    again once open (it may have been replaced by a FIFO since), and no more than the size the file system
    gives it is read: a /proc or /sys file, whose size says 0 but which reads without end, is refused. An
    error reading it (EIO from /proc/self/mem) is the input's fault: GradauditError, exit 2."""
    _regular(path, what)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise GradauditError(f"{path}: cannot load {what}: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise GradauditError(f"{path}: {what} is not a regular file (a FIFO, device or socket); not opened")
        if st.st_size > cap:
            raise GradauditError(f"{path}: {what} is larger than {_mib(cap)}; not read")
        chunks, left = [], st.st_size + 1  # one byte more: a file that is longer than it says
        while left > 0:
            chunk = os.read(fd, min(left, 16 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    except OSError as exc:
        raise GradauditError(f"{path}: cannot load {what}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > st.st_size:
        raise GradauditError(f"{path}: {what} holds more bytes than its size says (it is growing, or a /proc or "
                             "/sys file); not read")
    return data


def _mib(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n:,} bytes"


def _npy_bytes(f) -> int:
    """The bytes an .npy stream's header says its array holds (numpy allocates them before reading)."""
    import numpy as np
    from numpy.lib import format as npy

    version = npy.read_magic(f)
    shape, _, dtype = (npy.read_array_header_1_0(f) if version == (1, 0) else npy.read_array_header_2_0(f))
    count = 1
    for d in shape:
        count *= int(d)
    return count * np.dtype(dtype).itemsize


def check_inputs_file(path: str, cap: int = MAX_INPUT_BYTES) -> None:
    """Refuse an --inputs file that is not a regular file or whose arrays would take more than `cap` bytes."""
    size = _regular(path, "--inputs")
    try:
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as archive:
                declared = sum(info.file_size for info in archive.infolist())
                arrays = 0
                for info in archive.infolist():
                    if info.filename.endswith(".npy"):
                        with archive.open(info) as f:
                            arrays += _npy_bytes(f)
                    if max(declared, arrays) > cap:
                        break
        else:
            declared = size
            with open(path, "rb") as f:
                arrays = _npy_bytes(f)
    except (ValueError, OSError, zipfile.BadZipFile, TypeError) as exc:
        raise GradauditError(f"cannot read --inputs {path}: {exc}") from None
    if max(declared, arrays) > cap:
        raise GradauditError(f"--inputs {path} holds more than {cap >> 20} MiB of arrays once decompressed; "
                             "not loaded (gradient checks need small batches)")


def check_count_attrs(graph_def, op_def) -> None:
    """Refuse a graph whose count attributes (`Unpack`'s num, `N` of a list) exceed MAX_COUNT_ATTR, before
    any layout is built from them: a 13 KB file must not make a list of 3e8 outputs."""
    bodies = [graph_def.node] + [f.node_def for f in graph_def.library.function]
    for body in bodies:
        for node in body:
            definition = op_def(node.op)
            if definition is None:
                continue
            for arg in (*definition.input_arg, *definition.output_arg):
                if arg.number_attr and arg.number_attr in node.attr:
                    n = node.attr[arg.number_attr].i
                    if not 0 <= n <= MAX_COUNT_ATTR:
                        raise GradauditError(f"malformed model: {node.op} {node.name!r} has {arg.number_attr} = "
                                             f"{n}, beyond {MAX_COUNT_ATTR:,}")
