"""CRC64NVME, the transfer checksum: what S3 verifies whole (FULL_OBJECT, single PUT and
multipart alike) and what every reader checks while the bytes arrive.

awscrt (AWS's own C library) computes it at memory speed (several GB/s on one core, against
~1.5 GB/s for SHA-256 here) and combines the CRCs of adjacent pieces into the CRC of the whole
(`combine`), so parts uploaded or downloaded in parallel are checked against one full-object
value without reading any byte twice. On the wire and at S3 a CRC64NVME is the base64 of its 8
big-endian bytes (`x-amz-checksum-crc64nvme`), e.g. "AAAAAAAAAAA=" for no bytes.

Not cryptographic: it catches corruption (a flipped bit, a truncated or swapped part), not a
writer who means harm; presigned URLs (size and checksum signed in) are what keep other writers
out. SHA-256 stays where identity matters (blob names)."""

from __future__ import annotations

import base64
import binascii
from typing import Any

ALGORITHM = "CRC64NVME"
EMPTY = 0


def _crt() -> Any:
    # Imported when first needed: the SDK's import stays light for processes that never
    # move a payload through S3.
    from awscrt import checksums

    return checksums


def update(data: Any, previous: int = EMPTY) -> int:
    """The CRC64NVME of `previous`'s bytes followed by `data` (bytes-like)."""
    return int(_crt().crc64nvme(data, previous))


def of(data: Any) -> int:
    return update(data, EMPTY)


def combine(first: int, second: int, second_length: int) -> int:
    """The CRC of A || B from crc(A), crc(B) and len(B): no byte read again."""
    if second_length == 0:
        return first
    return int(_crt().combine_crc64nvme(first, second, second_length))


def combine_all(crcs: list[tuple[int, int]]) -> int:
    """The CRC of the pieces one after another, from each (crc, length) in order."""
    total = EMPTY
    for crc, length in crcs:
        total = combine(total, crc, length)
    return total


def to_b64(crc: int) -> str:
    """As S3 shows it (x-amz-checksum-crc64nvme): base64 of 8 big-endian bytes."""
    return base64.b64encode(crc.to_bytes(8, "big")).decode("ascii")


def from_b64(value: str) -> int:
    """ValueError for anything but the base64 of 8 bytes."""
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as e:
        raise ValueError("crc64nvme must be the base64 of 8 bytes") from e
    if len(raw) != 8:
        raise ValueError("crc64nvme must be the base64 of 8 bytes")
    return int.from_bytes(raw, "big")
