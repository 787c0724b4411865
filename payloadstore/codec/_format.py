"""Wire format constants and the small header helpers every ext kind shares.

A payload is one msgpack object.

* Without numpy/torch/PIL values larger than INLINE_MAX_BYTES it is plain msgpack; arrays,
  tensors and images that are small ride inside it as ext values with their bytes inline.
* Otherwise it is one ext32 value of type EXT_ENVELOPE whose body is::

      u8 format version | u32be structure length S | u32be data start D |
      structure (S bytes of msgpack) | zero padding | data section (from body offset D)

  The structure is the user's object, in which every large array/tensor/image is an ext value
  whose header carries `off`/`len` into the data section instead of inline bytes. Blocks in the
  data section start on ALIGNMENT-byte boundaries counted from the first byte of the payload, so a
  decoded view over a freshly received buffer is aligned for every dtype.

Every ext payload of EXT_NDARRAY / EXT_TORCH / EXT_IMAGE is `u8 format version | msgpack map`;
the map is the header and holds the value's raw bytes under "b" when they are inline, or the
block's place in the data section under "off" and "len" otherwise.
"""

from __future__ import annotations

import struct
from typing import Any

import msgpack

CONTENT_TYPE = "application/msgpack"
FORMAT_VERSION = 1

# Registered msgpack ext type codes (application range 0..127).
EXT_NDARRAY = 1
EXT_TORCH = 2
EXT_IMAGE = 3
# A blob reference (payloadstore.Blob), a fixext 16 (18 bytes in all): the blob's place in the
# value's blob list (the `blobs` the job or result carries, in the order the encoder met them),
# the first 7 bytes of its sha256 (checked against that list), its size (u64 big-endian). The
# full sha256 travels once per job in that list, not again in the payload.
EXT_BLOB = 4
BLOB_REF = struct.Struct(">B7sQ")
EXT_ENVELOPE = 16

# Values whose raw bytes are at most this size travel inline in the structure: for them a copy is
# cheaper than a data-section block with its alignment padding.
INLINE_MAX_BYTES = 1024
ALIGNMENT = 64
# msgpack ext32 carries a u32 length: the envelope (hence one payload with large values) is capped.
MAX_ENVELOPE_BODY = 0xFFFF_FFFF

EXT32_HEADER = struct.Struct(">BIb")  # 0xc9, length, type
ENVELOPE_PREFIX = struct.Struct(">BII")  # version, structure length, data start
MAX_NDIM = 64


class CodecError(ValueError):
    """A value that cannot be encoded, or bytes that are not a payload this codec can read."""


def ext_payload(header: dict[str, Any], inline: bytes | memoryview | None = None) -> bytes:
    """Builds an ext payload: the version byte, then the header map (inline bytes under "b")."""
    if inline is not None:
        header["b"] = bytes(inline)
    return bytes((FORMAT_VERSION,)) + msgpack.packb(header, use_bin_type=True)


def read_ext_payload(kind: str, data: bytes) -> tuple[dict[str, Any], memoryview | None]:
    """Splits an ext payload into its header map and its inline bytes (None for a data block)."""
    if not data:
        raise CodecError(f"empty {kind} ext value")
    version = data[0]
    if version != FORMAT_VERSION:
        raise CodecError(
            f"{kind} ext value has format version {version}; this reader knows version "
            f"{FORMAT_VERSION}: upgrade payloadstore to read it"
        )
    try:
        header = msgpack.unpackb(memoryview(data)[1:], raw=False)
    except (ValueError, TypeError) as e:
        raise CodecError(f"{kind} ext value has an unreadable header") from e
    if not isinstance(header, dict):
        raise CodecError(f"{kind} ext value header is not a map")
    inline = header.pop("b", None)
    if inline is not None and not isinstance(inline, bytes):
        raise CodecError(f"{kind} ext value has inline data that is not bytes")
    return header, None if inline is None else memoryview(inline)


def check_shape(kind: str, shape: Any) -> tuple[int, ...]:
    if not isinstance(shape, list) or len(shape) > MAX_NDIM:
        raise CodecError(f"{kind} ext value has an invalid shape {shape!r}")
    for dim in shape:
        if type(dim) is not int or dim < 0:
            raise CodecError(f"{kind} ext value has an invalid shape {shape!r}")
    return tuple(shape)


def element_count(shape: tuple[int, ...]) -> int:
    count = 1
    for dim in shape:
        count *= dim
    return count


def align_up(value: int, alignment: int = ALIGNMENT) -> int:
    return (value + alignment - 1) // alignment * alignment
