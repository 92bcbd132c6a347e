"""Deterministic binary encoding of driver state: pickle protocol 5 without its memo.

The state of a Dataflow driver is a tree of plain values (tuples, lists, dicts, ints, strings,
None, floats; a combiner's accumulators may be any picklable object). :func:`encode` writes it
with the C pickler in fast mode: no memo, so an object reached twice is written twice and equal
values give equal bytes however their objects happen to be shared (a replayed or reloaded state
writes what the original wrote). It replaced a varint format written value by value in Python
(the measurements: docs/nexmark.md, "Q11's Dataflow state"), which :func:`decode` still reads for
checkpoints written before: that format starts with a tag byte 0-10, a pickle with ``0x80``.
"""

from __future__ import annotations

import io
import pickle
import struct
import threading
from typing import Any

from dataflow_kafka.errors import InvalidArgumentError

__all__ = ["encode", "decode", "decode_part"]

_PROTO = 0x80               # a pickle's first byte (the PROTO opcode); the varint format's tags are 0-10


class _Writer:
    """One pickler in fast mode (no memo, so nothing carries over between values) and its buffer,
    reused: a driver encodes each changed key's windows on their own, and building a pickler per
    value cost twice the dump of a small one. A value whose pickling encodes another value (a
    combiner's ``__reduce__``) gets a pickler of its own."""

    def __init__(self) -> None:
        self.out = io.BytesIO()
        self.pickler = pickle.Pickler(self.out, protocol=5)
        self.pickler.fast = True
        self.busy = False


_writer = threading.local()


def encode(value: Any) -> bytes:
    """``value`` as pickle protocol 5 written without a memo (the module docstring)."""
    w = getattr(_writer, "w", None)
    if w is None:
        w = _writer.w = _Writer()
    if w.busy:
        w = _Writer()
    w.busy = True
    try:
        w.out.seek(0)
        w.out.truncate()
        w.pickler.dump(value)
        return w.out.getvalue()
    finally:
        w.busy = False


def decode_part(data: bytes) -> Any:
    """A value :func:`encode` wrote, kept as bytes inside a state that :func:`decode` read (its
    trailing bytes not checked again)."""
    return pickle.loads(data)


def decode(data: bytes) -> Any:
    """The value :func:`encode` (or the earlier varint format) wrote."""
    if data[:1] == bytes([_PROTO]):
        f = io.BytesIO(data)
        value = pickle.Unpickler(f).load()
        end = f.tell()
    else:
        value, end = _dec(data, 0)
    if end != len(data):
        raise InvalidArgumentError(f"corrupt driver state: {len(data) - end} trailing bytes")
    return value


# -- the varint format (read only) ---------------------------------------------------------------
# One tag byte per value; integers as zig-zag varints; None, bool, int, float, str, bytes and
# exact list / tuple / dict natively, any other object pickled.
_NONE, _FALSE, _TRUE, _INT, _FLOAT, _STR, _BYTES, _LIST, _TUPLE, _DICT, _PICKLE = range(11)
_F64 = struct.Struct("<d")


def _read_varint(b: bytes, i: int) -> tuple[int, int]:
    n = shift = 0
    while True:
        byte = b[i]
        i += 1
        n |= (byte & 0x7F) << shift
        if byte < 0x80:
            return n, i
        shift += 7


def _dec(b: bytes, i: int) -> tuple[Any, int]:
    tag = b[i]
    i += 1
    if tag == _NONE:
        return None, i
    if tag == _FALSE or tag == _TRUE:
        return tag == _TRUE, i
    if tag == _INT:
        z, i = _read_varint(b, i)
        return (z >> 1) if not z & 1 else -((z + 1) >> 1), i
    if tag == _FLOAT:
        return _F64.unpack_from(b, i)[0], i + 8
    n, i = _read_varint(b, i)
    if tag == _STR:
        return b[i : i + n].decode("utf-8"), i + n
    if tag == _BYTES:
        return bytes(b[i : i + n]), i + n
    if tag == _PICKLE:
        return pickle.loads(b[i : i + n]), i + n
    if tag == _DICT:
        d = {}
        for _ in range(n):
            k, i = _dec(b, i)
            d[k], i = _dec(b, i)
        return d, i
    if tag in (_LIST, _TUPLE):
        items = []
        for _ in range(n):
            x, i = _dec(b, i)
            items.append(x)
        return (items if tag == _LIST else tuple(items)), i
    raise InvalidArgumentError(f"corrupt driver state: unknown tag {tag} at byte {i - 1}")
