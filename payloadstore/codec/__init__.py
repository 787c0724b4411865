"""Payload codec: msgpack with registered ext types for numpy arrays, torch tensors and PIL images.

`encode(obj)` returns an `Encoded` whose chunks reference large array memory instead of copying it;
`decode(data)` returns numpy arrays as read-only views over `data` (or owned copies with
`copy=True`). numpy, torch and Pillow are optional: they are imported only when a value of theirs is
met. Payloads written by zaku clients (`{"ztype", "b", "dtype", "shape"}` maps) decode too.

The wire format is described in `payloadstore/codec/_format.py` and in the README's "Codec" section.
"""

from ._core import Encoded, decode, encode
from ._format import (
    CONTENT_TYPE,
    EXT_ENVELOPE,
    EXT_IMAGE,
    EXT_NDARRAY,
    EXT_TORCH,
    FORMAT_VERSION,
    INLINE_MAX_BYTES,
    CodecError,
)

__all__ = [
    "CONTENT_TYPE",
    "EXT_ENVELOPE",
    "EXT_IMAGE",
    "EXT_NDARRAY",
    "EXT_TORCH",
    "FORMAT_VERSION",
    "INLINE_MAX_BYTES",
    "CodecError",
    "Encoded",
    "decode",
    "encode",
]
