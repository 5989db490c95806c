"""The model's variables/ checked before TensorFlow restores them: special files are refused (exit 2), and a
missing, truncated or corrupt index or data file is named, so that the audit says which file keeps the model
from running instead of failing inside TensorFlow's restore. The index (a table of the LevelDB format, one
BundleEntryProto per tensor) is read here in Python, without TensorFlow's readers."""

from __future__ import annotations

import os
import struct

from .budget import _regular, read_capped

INDEX = "variables.index"
MAX_INDEX_BYTES = 256 << 20
_MAGIC = 0xDB4775248B80FB57  # LevelDB's table magic number, which TensorFlow's tensor bundles keep
_FOOTER = 48


class CorruptIndex(ValueError):
    pass


def check_variables(model_dir: str) -> None:
    """Refuse a model whose variables/ folder holds a FIFO, a device or a socket (or a link to one) before
    anything opens it: TensorFlow's restore would block, or read /dev/zero for ever. GradauditError: exit 2."""
    folder = os.path.join(model_dir, "variables")
    if os.path.isdir(folder):
        for name in sorted(os.listdir(folder)):
            _regular(os.path.join(folder, name), "a variables file")


def variables_problem(model_dir: str, has_variables: bool) -> str | None:
    """Why TensorFlow could not restore the model's variables (one line naming the file), or None."""
    folder = os.path.join(model_dir, "variables")
    index = os.path.join(folder, INDEX)
    if not os.path.exists(index):
        return f"{_rel(model_dir, index)} is missing" if has_variables else None
    try:
        entries = _bundle_entries(read_capped(index, "the variables index", MAX_INDEX_BYTES))
    except CorruptIndex as exc:
        return f"{_rel(model_dir, index)} is corrupt ({exc})"
    header = entries.pop(b"", None)
    shards = header.num_shards if header is not None else 1
    needed: dict[int, int] = {}  # shard -> the bytes its tensors span
    for entry in entries.values():
        if not entry.slices:  # a partitioned variable's entry holds no bytes itself
            needed[entry.shard_id] = max(needed.get(entry.shard_id, 0), entry.offset + entry.size)
    for shard, size in sorted(needed.items()):
        data = os.path.join(folder, f"variables.data-{shard:05d}-of-{shards:05d}")
        if not os.path.exists(data):
            return f"{_rel(model_dir, data)} is missing"
        found = os.stat(data).st_size
        if found < size:
            return f"{_rel(model_dir, data)} is truncated: {found:,} bytes, the index needs {size:,}"
    return None


def _rel(model_dir: str, path: str) -> str:
    return os.path.relpath(path, model_dir)


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        if pos >= len(data) or shift > 63:
            raise CorruptIndex("a varint runs past its block")
        byte = data[pos]
        value |= (byte & 0x7F) << shift
        pos, shift = pos + 1, shift + 7
        if not byte & 0x80:
            return value, pos


def _block(data: bytes, offset: int, size: int) -> list[tuple[bytes, bytes]]:
    """The (key, value) entries of one uncompressed table block."""
    if offset + size + 5 > len(data):
        raise CorruptIndex("a block lies past the end of the file")
    if data[offset + size] != 0:
        raise CorruptIndex("compressed block")
    body = data[offset:offset + size]
    if len(body) < 4:
        raise CorruptIndex("a block is too short")
    restarts = struct.unpack_from("<I", body, len(body) - 4)[0]
    end = len(body) - 4 - 4 * restarts
    if end < 0:
        raise CorruptIndex("a block's restart array is larger than the block")
    entries, key, pos = [], b"", 0
    while pos < end:
        shared, pos = _varint(body, pos)
        unshared, pos = _varint(body, pos)
        length, pos = _varint(body, pos)
        if shared > len(key) or pos + unshared + length > end:
            raise CorruptIndex("an entry runs past its block")
        key = key[:shared] + body[pos:pos + unshared]
        pos += unshared
        entries.append((key, body[pos:pos + length]))
        pos += length
    return entries


def _bundle_entries(data: bytes) -> dict:
    """Tensor name -> BundleEntryProto (b"" -> the BundleHeaderProto) of a tensor bundle index."""
    from google.protobuf.message import DecodeError
    from tensorflow.core.protobuf import tensor_bundle_pb2

    if len(data) < _FOOTER or struct.unpack_from("<Q", data, len(data) - 8)[0] != _MAGIC:
        raise CorruptIndex("not a tensor bundle index: bad magic number")
    footer = data[len(data) - _FOOTER:]
    _, pos = _varint(footer, 0)  # the metaindex block: unused by tensor bundles
    _, pos = _varint(footer, pos)
    index_offset, pos = _varint(footer, pos)
    index_size, _ = _varint(footer, pos)
    entries: dict = {}
    try:
        for _, handle in _block(data, index_offset, index_size):
            offset, pos = _varint(handle, 0)
            size, _ = _varint(handle, pos)
            for key, value in _block(data, offset, size):
                proto = tensor_bundle_pb2.BundleHeaderProto() if key == b"" else tensor_bundle_pb2.BundleEntryProto()
                proto.ParseFromString(value)
                entries[key] = proto
    except DecodeError as exc:
        raise CorruptIndex(f"an entry is not a tensor bundle entry: {exc}") from None
    return entries
