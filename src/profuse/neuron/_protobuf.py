"""Just enough of the protobuf wire format to read the NEFF's debug-info files, which ship no schema."""
from __future__ import annotations

from collections.abc import Iterator

Field = tuple[int, int, "int | bytes"]  # (number, wire type, value)


class WireError(ValueError):
    """Bytes that are not a protobuf message."""


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        if i >= len(buf) or shift > 63:
            raise WireError("truncated varint")
        byte = buf[i]
        i += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, i


def fields(buf: bytes) -> Iterator[Field]:
    """Every top-level field of one message, in order."""
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        number, wire = key >> 3, key & 7
        value: int | bytes
        if wire == 0:
            value, i = _varint(buf, i)
        elif wire == 2:
            n, i = _varint(buf, i)
            if i + n > len(buf):
                raise WireError("length runs past the end")
            value, i = buf[i:i + n], i + n
        elif wire in (1, 5):
            width = 8 if wire == 1 else 4
            if i + width > len(buf):
                raise WireError("fixed field runs past the end")
            value, i = buf[i:i + width], i + width
        else:
            raise WireError(f"wire type {wire}")
        if number == 0:
            raise WireError("field number 0")
        yield number, wire, value


def packed_varints(buf: bytes) -> list[int]:
    """A packed ``repeated int`` field."""
    out, i = [], 0
    while i < len(buf):
        v, i = _varint(buf, i)
        out.append(v)
    return out
