"""Count the protobuf messages a binary file would parse into, before parsing it.

Parsed, every message costs its struct (about 110 bytes for an empty NodeDef with the upb runtime) however few
bytes it takes in the file (two: a tag and a zero length), so 20 MB of empty NodeDefs parse into 10 million
messages and 1.1 GB. The scan walks the wire format with the message types' descriptors: it descends into the
fields that hold messages (map entries included) and skips every other field, strings and packed arrays by
their length, without allocating anything. A file of n bytes holds at most 1 + n // 2 messages (each takes a
tag and a length in its parent), so a file of at most twice the limit is not scanned at all, and a scan stops
as soon as the messages counted plus half the bytes left are within the limit."""

from __future__ import annotations

from functools import cache

MAX_DEPTH = 100  # protobuf's own recursion limit: deeper messages are counted by the bytes they take


class _Layout:
    """For one message type: field number -> the layout of the message type it holds (None: not a message)."""

    __slots__ = ("messages",)

    def __init__(self) -> None:
        self.messages: dict[int, _Layout] = {}


@cache
def _layout(descriptor) -> _Layout:
    layout = _Layout()
    _fill(descriptor, layout, {descriptor.full_name: layout})
    return layout


def _fill(descriptor, layout: _Layout, seen: dict[str, _Layout]) -> None:
    for field in descriptor.fields:
        sub = field.message_type
        if sub is None:
            continue
        if sub.full_name not in seen:  # recursive types (AttrValue, StructuredValue) share one layout
            seen[sub.full_name] = _Layout()
            _fill(sub, seen[sub.full_name], seen)
        layout.messages[field.number] = seen[sub.full_name]


def message_count_bound(data: bytes, descriptor, limit: int) -> int:
    """A bound on the messages `data` parses into as a message of type `descriptor`: their exact number when
    the file has to be scanned, or a larger one that is still at most `limit` when the scan can stop early;
    a result above `limit` means the file holds more than `limit` messages (or is malformed where the bound
    counts half the bytes left). Unknown fields and groups are kept as bytes by the parser and counted so."""
    if 1 + len(data) // 2 <= limit:
        return 1 + len(data) // 2
    return count_messages(data, descriptor, limit, limit)


def count_messages(data: bytes, descriptor, stop_above: float = float("inf"), accept_within: float = -1) -> int:
    """The messages `data` parses into, counted by scanning it; the scan stops once the count is above
    `stop_above` (returning it), or once the count plus half the bytes left is within `accept_within`
    (returning that sum)."""
    n, limit, count, pos = len(data), accept_within, 1, 0
    # one frame per message being scanned: (its end, its layout)
    stack: list[tuple[int, _Layout]] = [(n, _layout(descriptor))]
    end, layout = stack[-1]
    while True:
        if pos >= end:
            if pos > end:  # a field ran past its message: malformed, the parser will refuse it
                return count + (n - min(pos, n)) // 2 + 1
            stack.pop()
            if not stack:
                return count
            end, layout = stack[-1]
            continue
        b = data[pos]  # the tag
        pos += 1
        if b < 0x80:
            tag = b
        else:
            tag, pos = _varint_rest(data, pos, b)
            if tag < 0:
                return count + n // 2
        wire = tag & 7
        if wire == 2:
            b = data[pos] if pos < n else 0x80
            pos += 1
            if b < 0x80:
                length = b
            else:
                length, pos = _varint_rest(data, pos, b)
                if length < 0:
                    return count + n // 2
            sub = layout.messages.get(tag >> 3)
            if sub is None:
                pos += length  # a string, bytes, packed array or unknown field: no message in it
                if count + (n - min(pos, n)) // 2 <= limit:
                    return count + (n - min(pos, n)) // 2
                continue
            count += 1
            if count > stop_above:
                return count
            if len(stack) >= MAX_DEPTH:
                count += length // 2
                pos += length
                continue
            end, layout = pos + length, sub
            stack.append((end, layout))
        elif wire == 0:
            while pos < n and data[pos] >= 0x80:
                pos += 1
            pos += 1
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:  # groups (no TensorFlow message has them) or an invalid wire type: count by the bytes left
            return count + (n - pos) // 2 + 1


def _varint_rest(data: bytes, pos: int, first: int) -> tuple[int, int]:
    """The varint whose first byte `first` (>= 0x80) was read, its remaining bytes from `pos`: (value, the
    position after it), or (-1, pos) when it runs past the data or past 64 bits (the one-byte case stays
    inline in the caller's loop: nearly every tag and length is one byte)."""
    value, shift, n = first & 0x7F, 7, len(data)
    while True:
        if pos >= n or shift > 63:
            return -1, pos
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7

