"""Payload codec: msgpack with registered ext types for numpy arrays, torch tensors and PIL images.

`encode(obj)` returns an `Encoded` whose chunks reference large array/tensor memory instead of
copying it; `decode(data)` returns numpy arrays as read-only views over `data` (owned, writable
copies with `copy=True`). numpy, torch and Pillow are optional: each is imported only when a value
of its kind is met. Payloads written by zaku clients (`{"ztype", "b", "dtype", "shape"}` maps)
decode too, wherever they sit in the structure.

Choices a caller sees:
- tuples decode as lists (msgpack has one array type; any msgpack reader agrees on that);
- timezone-aware datetimes travel as the standard msgpack timestamp (ext -1) and decode as UTC
  datetimes of the same instant; naive datetimes are refused (they name no instant);
- numpy scalars decode as numpy scalars of the same type; subclasses of dict/list/int/float/str
  (OrderedDict, IntEnum, ...) decode as the base type; other types raise CodecError.

The byte layout is described in `_format.py` and in the README's "Codec" section.
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
