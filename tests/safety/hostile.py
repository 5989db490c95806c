"""Builders of hostile model files for the bound tests: each writes real bytes to disk."""

from __future__ import annotations

import struct


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _block(entries: list[tuple[bytes, bytes]]) -> bytes:
    """One uncompressed LevelDB table block (no prefix sharing, one restart point) with its 5-byte trailer."""
    body = b"".join(_varint(0) + _varint(len(k)) + _varint(len(v)) + k + v for k, v in entries)
    body += struct.pack("<II", 0, 1)  # restart offsets [0], their count
    return body + b"\0" + b"\0\0\0\0"  # not compressed; the crc is not checked


def tensor_bundle_index(n_entries: int, tensor_bytes: int = 4) -> bytes:
    """A variables.index of `n_entries` float tensors in shard 0, of one data block (the LevelDB table format
    TensorFlow's tensor bundles use)."""
    from tensorflow.core.protobuf import tensor_bundle_pb2

    header = tensor_bundle_pb2.BundleHeaderProto(num_shards=1).SerializeToString()
    entries = [(b"", header)]
    for i in range(n_entries):
        entry = tensor_bundle_pb2.BundleEntryProto(dtype=1, shard_id=0, offset=i * tensor_bytes, size=tensor_bytes)
        entries.append((b"v%09d" % i, entry.SerializeToString()))
    data = _block(entries)
    size = len(data) - 5
    index = _block([(b"v\xff", _varint(0) + _varint(size))])
    index_offset = len(data)
    footer = _varint(0) + _varint(0) + _varint(index_offset) + _varint(len(index) - 5)
    footer = footer.ljust(40, b"\0") + struct.pack("<Q", 0xDB4775248B80FB57)
    return data + index + footer


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field: its tag, its length, its bytes."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def empty_nodes_saved_model(n_nodes: int) -> bytes:
    """A saved_model.pb whose graph holds `n_nodes` empty NodeDefs (two bytes each in the file, some 110 bytes each
    once parsed): SavedModel.meta_graphs(2) -> MetaGraphDef.graph_def(2) -> GraphDef.node(1)."""
    return _field(2, _field(2, _field(1, b"")[:2] * n_nodes))


def small_saved_model(path: str) -> str:
    """A healthy three-weight model, the base the bounds tests break one file of."""
    import tensorflow as tf

    class Small(tf.Module):
        def __init__(self):
            self.w = tf.Variable([1.0, 2.0, 3.0], name="w")

        @tf.function(input_signature=[tf.TensorSpec([3], tf.float32, name="x")])
        def __call__(self, x):
            a, b, c = tf.unstack(x * self.w)
            return {"y": a + b * c}

    module = Small()
    tf.saved_model.save(module, path, signatures={"serving_default": module.__call__})
    return path

