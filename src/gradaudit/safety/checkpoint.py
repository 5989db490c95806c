"""The model's variables/ checked before TensorFlow restores them: special files are refused (exit 2), and a
missing, truncated or corrupt index or data file is named, so that the audit says which file keeps the model
from running instead of failing inside TensorFlow's restore. The index (a table of the LevelDB format, one
BundleEntryProto per tensor) is read here in Python, without TensorFlow's readers."""

from __future__ import annotations

import os
import struct

from .budget import _regular, read_capped

INDEX = "variables.index"
# The check runs in gradaudit's own process, before the child that restores the variables: it must stay cheap on
# any file. It reads about 400,000 entries a second here, in bounded memory (it keeps no entry); a real index has
# one entry per variable (and slot, and slice): tens of thousands at most. 200,000 entries: about 0.5 s.
MAX_INDEX_BYTES = 32 << 20
MAX_INDEX_ENTRIES = 200_000
MAX_KEY_BYTES = 4096  # a tensor's name in the checkpoint
_MAGIC = 0xDB4775248B80FB57  # LevelDB's table magic number, which TensorFlow's tensor bundles keep
_FOOTER = 48


class CorruptIndex(ValueError):
    pass


class IndexTooLarge(CorruptIndex):
    """An index beyond what the check reads (MAX_INDEX_BYTES, MAX_INDEX_ENTRIES): reported, not read."""


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
        size = _regular(index, "the variables index")
        if size > MAX_INDEX_BYTES:
            raise IndexTooLarge(f"{size:,} bytes")
        header, needed = _shard_extents(read_capped(index, "the variables index", MAX_INDEX_BYTES))
    except IndexTooLarge as exc:
        return (f"{_rel(model_dir, index)} is too large to check before the restore ({exc}; the check reads at "
                f"most {MAX_INDEX_BYTES >> 20} MiB and {MAX_INDEX_ENTRIES:,} entries); not read")
    except CorruptIndex as exc:
        return f"{_rel(model_dir, index)} is corrupt ({exc})"
    shards = header.num_shards if header is not None else 1
    for shard, extent in sorted(needed.items()):
        data = os.path.join(folder, f"variables.data-{shard:05d}-of-{shards:05d}")
        if not os.path.exists(data):
            return f"{_rel(model_dir, data)} is missing"
        found = os.stat(data).st_size
        if found < extent:
            return f"{_rel(model_dir, data)} is truncated: {found:,} bytes, the index needs {extent:,}"
    return None


def _rel(model_dir: str, path: str) -> str:
    return os.path.relpath(path, model_dir)


def _varint(data: bytes | memoryview, pos: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        if pos >= len(data) or shift > 63:
            raise CorruptIndex("a varint runs past its block")
        byte = data[pos]
        value |= (byte & 0x7F) << shift
        pos, shift = pos + 1, shift + 7
        if not byte & 0x80:
            return value, pos


def _block(data: bytes, offset: int, size: int):
    """The (key, value) entries of one uncompressed table block, one at a time."""
    if offset + size + 5 > len(data):
        raise CorruptIndex("a block lies past the end of the file")
    if data[offset + size] != 0:
        raise CorruptIndex("compressed block")
    body = memoryview(data)[offset:offset + size]
    if len(body) < 4:
        raise CorruptIndex("a block is too short")
    restarts = struct.unpack_from("<I", body, len(body) - 4)[0]
    end = len(body) - 4 - 4 * restarts
    if end < 0:
        raise CorruptIndex("a block's restart array is larger than the block")
    key, pos = b"", 0
    while pos < end:
        shared, pos = _varint(body, pos)
        unshared, pos = _varint(body, pos)
        length, pos = _varint(body, pos)
        if shared > len(key) or pos + unshared + length > end:
            raise CorruptIndex("an entry runs past its block")
        if shared + unshared > MAX_KEY_BYTES:
            raise CorruptIndex(f"a tensor name is longer than {MAX_KEY_BYTES:,} bytes")
        key = key[:shared] + bytes(body[pos:pos + unshared])
        pos += unshared
        yield key, body[pos:pos + length]
        pos += length


def _shard_extents(data: bytes) -> tuple:
    """A tensor bundle index's BundleHeaderProto (None if it has none) and, per shard, the bytes its tensors
    span, reading at most MAX_INDEX_ENTRIES entries and each byte of the file in at most one block."""
    from google.protobuf.message import DecodeError
    from tensorflow.core.protobuf import tensor_bundle_pb2

    if len(data) < _FOOTER or struct.unpack_from("<Q", data, len(data) - 8)[0] != _MAGIC:
        raise CorruptIndex("not a tensor bundle index: bad magic number")
    footer = data[len(data) - _FOOTER:]
    _, pos = _varint(footer, 0)  # the metaindex block: unused by tensor bundles
    _, pos = _varint(footer, pos)
    index_offset, pos = _varint(footer, pos)
    index_size, _ = _varint(footer, pos)
    header = None
    needed: dict[int, int] = {}  # shard -> the bytes its tensors span
    count, blocks_bytes = 0, index_size
    entry = tensor_bundle_pb2.BundleEntryProto()
    try:
        for _, handle in _block(data, index_offset, index_size):
            offset, pos = _varint(handle, 0)
            size, _ = _varint(handle, pos)
            blocks_bytes += size
            if blocks_bytes > len(data):  # blocks that overlap or repeat: a real table's do not
                raise CorruptIndex("its blocks add up to more than the file")
            for key, value in _block(data, offset, size):
                if key == b"":
                    header = tensor_bundle_pb2.BundleHeaderProto()
                    header.ParseFromString(bytes(value))
                    continue
                count += 1
                if count > MAX_INDEX_ENTRIES:
                    raise IndexTooLarge(f"more than {MAX_INDEX_ENTRIES:,} entries")
                entry.Clear()
                entry.ParseFromString(bytes(value))
                if not entry.slices:  # a partitioned variable's entry holds no bytes itself
                    needed[entry.shard_id] = max(needed.get(entry.shard_id, 0), entry.offset + entry.size)
    except DecodeError as exc:
        raise CorruptIndex(f"an entry is not a tensor bundle entry: {exc}") from None
    return header, needed
