"""encode/decode: msgpack's C packer and unpacker do the walking; ext values are built on the side.

Encoding runs one `msgpack.packb` with a `default` hook. The hook turns each numpy/torch/PIL
value into a small ext value; a value larger than INLINE_MAX_BYTES leaves only its header (with an
offset) in the structure while its memory is queued as a separate chunk of the data section, so a
64 MiB array is never copied into a joined buffer. Decoding runs one `msgpack.unpackb` over the
structure with an `ext_hook` that builds arrays over the data section of the input buffer, which is
what makes the decode zero-copy at the C unpacker's speed, however many small elements surround it.
"""

from __future__ import annotations

import datetime as _dt
import gc
import hashlib
import importlib
import os
import struct
import sys
from collections.abc import Callable, Iterator
from typing import Any

import msgpack

from . import _format as fmt
from ._format import CodecError

# Top-level bytes at least this large are emitted as a bin header plus the caller's buffer.
_DIRECT_BIN_MIN = 64 * 1024
# bytes at least this large a level or two down (a job's args and kwargs) are emitted as a bin32
# header plus the caller's bytes, not copied into msgpack's buffer (see _lift_bytes).
_LIFT_BIN_MIN = 1024 * 1024
# A placeholder's ext code while packing; its 16 random bytes make it findable in the output.
_LIFT_EXT_CODE = 0x6C
# Containers longer than this are not searched (a result that is a list of a million floats).
_LIFT_MAX_ITEMS = 256
# msgpack's packer refuses structures nested deeper than this.
_MAX_DEPTH = 512
# Chunks smaller than this are coalesced, so many small blocks do not become many tiny writes.
_COALESCE_BELOW = 16 * 1024
_ITER_SLICE = 1024 * 1024
# Unpacking a structure this large creates enough containers to trigger the cyclic GC many times
# over objects that cannot be garbage yet; pausing it made such decodes 1.5-2x faster.
_GC_PAUSE_MIN = 1024 * 1024

_KIND_NAMES = {fmt.EXT_NDARRAY: "numpy", fmt.EXT_TORCH: "torch", fmt.EXT_IMAGE: "image"}
_KIND_MODULES = {fmt.EXT_NDARRAY: "_numpy", fmt.EXT_TORCH: "_torch", fmt.EXT_IMAGE: "_image"}
_KIND_PACKAGES = {fmt.EXT_NDARRAY: "numpy", fmt.EXT_TORCH: "torch", fmt.EXT_IMAGE: "Pillow"}
_ZTYPES = {"numpy.ndarray": fmt.EXT_NDARRAY, "torch.Tensor": fmt.EXT_TORCH, "image": fmt.EXT_IMAGE}
_ZDATA_KEYS = frozenset(("ztype", "b", "dtype", "shape"))


class Encoded:
    """An encoded payload as a list of chunks; large array memory is referenced, not copied.

    The chunks may point into the encoded arrays and tensors: do not mutate them until the payload
    has been stored.
    """

    __slots__ = ("blobs", "chunks", "nbytes")
    content_type = fmt.CONTENT_TYPE

    def __init__(self, chunks: list[bytes | memoryview], blobs: tuple = ()):
        self.chunks = chunks
        self.nbytes = sum(len(chunk) for chunk in chunks)
        #: the `Blob`s the value references (each once, in the order met)
        self.blobs = blobs

    def __len__(self) -> int:
        return self.nbytes

    def __iter__(self) -> Iterator[memoryview]:
        return self.iter_slices()

    def iter_slices(self, size: int = _ITER_SLICE) -> Iterator[memoryview]:
        """Yields the payload as memoryview slices of at most `size` bytes (for streaming uploads)."""
        for chunk in self.chunks:
            view = memoryview(chunk)
            for start in range(0, len(view), size):
                yield view[start : start + size]

    def sha256(self) -> str:
        digest = hashlib.sha256()
        for chunk in self.chunks:
            digest.update(chunk)
        return digest.hexdigest()

    def crc64nvme(self) -> str:
        """CRC64NVME of the encoded bytes, as S3 shows it (base64 of 8 bytes)."""
        from .. import _checksum

        crc = _checksum.EMPTY
        for chunk in self.chunks:
            crc = _checksum.update(chunk, crc)
        return _checksum.to_b64(crc)

    def tobytes(self) -> bytes:
        if len(self.chunks) == 1 and type(self.chunks[0]) is bytes:
            return self.chunks[0]
        return b"".join(self.chunks)

    __bytes__ = tobytes

    def __repr__(self) -> str:
        return f"Encoded(nbytes={self.nbytes}, chunks={len(self.chunks)})"


def _kind_module(kind: int):
    """The module for one ext kind, imported on first use (it imports numpy/torch/PIL)."""
    try:
        return importlib.import_module(f"{__package__}.{_KIND_MODULES[kind]}")
    except ImportError as e:
        raise CodecError(
            f"payload holds a {_KIND_NAMES[kind]} value; install {_KIND_PACKAGES[kind]} to "
            f"decode it: {e}"
        ) from e


class _Encoder:
    """The `default` hook of one packb call plus the data-section blocks it queued."""

    def __init__(self) -> None:
        self.blocks: list[tuple[int, bytes | memoryview]] = []  # (offset in data section, bytes)
        self.data_len = 0
        self.blobs: dict[str, Any] = {}
        # A tuple (or a dict or list subclass) met: it may be a map key, which msgpack writes as
        # an array or map that no reader can use as a key. Native keys never reach this hook.
        self.container_met = False

    def default(self, value: Any) -> Any:
        blobs = sys.modules.get("payloadstore._blobs")
        if blobs is not None and isinstance(value, blobs.Blob):
            index = list(self.blobs).index(value.sha256) if value.sha256 in self.blobs else None
            if index is None:
                index = len(self.blobs)
                if index > 255:
                    raise CodecError("a value references at most 256 distinct blobs")
                self.blobs[value.sha256] = value
            digest = bytes.fromhex(value.sha256)
            return msgpack.ExtType(fmt.EXT_BLOB, fmt.BLOB_REF.pack(index, digest[:7], value.size))
        numpy = sys.modules.get("numpy")
        if numpy is not None and isinstance(value, (numpy.ndarray, numpy.generic)):
            from . import _numpy

            return self._ext(fmt.EXT_NDARRAY, *_numpy.to_header_and_bytes(value))
        torch = sys.modules.get("torch")
        if torch is not None and isinstance(value, torch.Tensor):
            from . import _torch

            return self._ext(fmt.EXT_TORCH, *_torch.to_header_and_bytes(value))
        pil_image = sys.modules.get("PIL.Image")
        if pil_image is not None and isinstance(value, pil_image.Image):
            from . import _image

            return self._ext(fmt.EXT_IMAGE, *_image.to_header_and_bytes(value))
        if isinstance(value, (tuple, dict, list)):
            self.container_met = True
        return _plain(value)

    def _ext(self, kind: int, header: dict, raw: bytes | memoryview) -> msgpack.ExtType:
        if len(raw) <= fmt.INLINE_MAX_BYTES:
            return msgpack.ExtType(kind, fmt.ext_payload(header, raw))
        offset = fmt.align_up(self.data_len)
        header["off"], header["len"] = offset, len(raw)
        self.blocks.append((offset, raw))
        self.data_len = offset + len(raw)
        return msgpack.ExtType(kind, fmt.ext_payload(header))


def _plain(value: Any) -> Any:
    """Maps the remaining types msgpack's strict mode hands back to plain msgpack values."""
    if isinstance(value, tuple):
        return list(value)  # documented: tuples decode as lists, as in JSON
    if isinstance(value, dict):
        return dict(value)
    if isinstance(value, list):
        return list(value)
    if isinstance(value, _dt.datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise CodecError(
                f"cannot encode naive datetime {value.isoformat()}: it names no instant; attach a "
                "tzinfo (e.g. datetime.timezone.utc)"
            )
        return msgpack.Timestamp.from_datetime(value)
    if isinstance(value, str):
        return str.__str__(value)  # str() would give an Enum mixin's "Cls.NAME"
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, bytes):
        return bytes(value)
    kind = type(value)
    raise CodecError(
        f"cannot encode a value of type {kind.__module__}.{kind.__qualname__}: supported are None, "
        "bool, int, float, str, bytes, list, tuple, dict, timezone-aware datetime, numpy arrays "
        "and scalars, torch tensors and PIL images"
    )


def _pack(value: Any, default: Callable[[Any], Any]) -> bytes:
    try:
        return msgpack.packb(
            value, default=default, use_bin_type=True, strict_types=True, datetime=True
        )
    except CodecError:
        raise
    except OverflowError as e:
        raise CodecError(f"cannot encode an integer outside msgpack's 64-bit range: {e}") from e
    except (TypeError, ValueError, BufferError) as e:
        raise CodecError(f"cannot encode the value: {e}") from e


def _direct_bin(value: bytes | bytearray | memoryview) -> Encoded | None:
    view = memoryview(value)
    if not view.c_contiguous:
        return None
    view = view.cast("B") if view.format != "B" or view.ndim != 1 else view
    if len(view) > 0xFFFF_FFFF:
        raise CodecError("cannot encode bytes of 4 GiB or more in one msgpack bin value")
    return Encoded([struct.pack(">BI", 0xC6, len(view)), view])


def encode(obj: Any, *, where: str = "value", call: bool = False) -> Encoded:
    """Encodes `obj` to msgpack with the payloadstore ext types; see the module doc for the layout.

    A value no reader could decode (a tuple or frozenset as a dict key) raises CodecError naming
    where it is, from `where` (the value's name in the message); `call=True`: `obj` is a job's
    `{"args": [...], "kwargs": {...}}`, and the places read `args[0]`, `kwargs['x']`."""
    if type(obj) in (bytes, bytearray, memoryview) and memoryview(obj).nbytes >= _DIRECT_BIN_MIN:
        direct = _direct_bin(obj)
        if direct is not None:
            return direct
    lifted: list[tuple[bytes, bytes]] = []
    shallow = _lift_bytes(obj, lifted, 2)
    encoder = _Encoder()
    try:
        structure = _pack(shallow, encoder.default)
    except CodecError:
        _refuse_bad_key(obj, where, call)
        raise
    if encoder.container_met:
        _check_keys(structure, obj, where, call)
    if lifted:
        spliced = None if encoder.blocks else _splice(structure, lifted)
        if spliced is not None:
            return Encoded(spliced, tuple(encoder.blobs.values()))
        # Arrays too (an envelope), or a marker not found once: the plain way.
        encoder = _Encoder()
        structure = _pack(obj, encoder.default)
    if not encoder.blocks:
        return Encoded([structure], tuple(encoder.blobs.values()))
    return _envelope(structure, encoder)


def _check_keys(structure: bytes, obj: Any, where: str, call: bool) -> None:
    """Refuses a value whose structure has a map key that decodes unhashable (a tuple key
    becomes an array): the daemon's decode would fail on it after the job was created. Only
    asked when the packer met a tuple, so plain values pay nothing; the check is one C-speed
    unpack of the structure (arrays' bytes are ext payloads, not walked), and the Python walk
    that names the place runs only once a bad key is known to be there."""
    try:
        msgpack.unpackb(
            structure, ext_hook=_ignore_ext, raw=True, strict_map_key=False, timestamp=0
        )
    except (TypeError, ValueError, msgpack.UnpackException):
        _refuse_bad_key(obj, where, call)


def _ignore_ext(code: int, data: bytes) -> None:
    return None


def _refuse_bad_key(obj: Any, where: str, call: bool) -> None:
    """Raises CodecError naming the first map key of `obj` no reader can take as a key."""
    found = _bad_key(obj, [], set())
    if found is None:
        return
    path, key = found
    if call and path and path[0] in ("args", "kwargs"):
        where, path = str(path[0]), path[1:]
    place = where + "".join(f"[{step!r}]" for step in path)
    why = (
        "msgpack writes a tuple as an array, and no reader can use an array as a map key"
        if isinstance(key, tuple)
        else "map keys must be scalars"
    )
    raise CodecError(
        f"cannot encode the dict key {key!r} (a {type(key).__name__}) in {place}: {why}; use a "
        "str, int, float, bool, None or bytes key (e.g. a joined string)"
    )


def _bad_key(value: Any, path: list, seen: set[int]) -> tuple[list, Any] | None:
    """(path, key) of the first dict key in `value` that is a container (a tuple, frozenset,
    ...), depth first; None when there is none. Only on the error path: it walks each container
    once (`seen`, by id), as deep as msgpack packs: a value that holds itself twice, or a
    structure sharing its parts deeper than msgpack packs, would otherwise be a walk of 2**512
    paths where msgpack refused it at once."""
    if len(path) > _MAX_DEPTH or not isinstance(value, (dict, list, tuple)):
        return None
    if id(value) in seen:
        return None
    seen.add(id(value))
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, (tuple, frozenset, list, dict, set)):
                return path, key
            found = _bad_key(item, [*path, key], seen)
            if found is not None:
                return found
    else:
        for i, item in enumerate(value):
            found = _bad_key(item, [*path, i], seen)
            if found is not None:
                return found
    return None


def _lift_bytes(value: Any, lifted: list[tuple[bytes, bytes]], depth: int) -> Any:
    """`value` with each large `bytes` found in dicts and lists up to `depth` levels down (a
    job's `{"args": [...], "kwargs": {...}}`) replaced by a placeholder ext value; the containers
    on the way are copied (shallow), never changed. Deeper or smaller bytes, and containers of
    more than _LIFT_MAX_ITEMS entries, are left to msgpack (which copies them)."""
    kind = type(value)
    if kind is bytes:
        if len(value) >= _LIFT_BIN_MIN and len(value) <= 0xFFFF_FFFF:
            marker = os.urandom(16)
            lifted.append((marker, value))
            return msgpack.ExtType(_LIFT_EXT_CODE, marker)
        return value
    if depth <= 0 or kind not in (list, dict) or len(value) > _LIFT_MAX_ITEMS:
        return value
    if kind is list:
        items = [_lift_bytes(item, lifted, depth - 1) for item in value]
        return items if any(a is not b for a, b in zip(items, value, strict=True)) else value
    if kind is dict:
        pairs = {k: _lift_bytes(v, lifted, depth - 1) for k, v in value.items()}
        return pairs if any(pairs[k] is not v for k, v in value.items()) else value
    return value


def _splice(structure: bytes, lifted: list[tuple[bytes, bytes]]) -> list[bytes | memoryview] | None:
    """The chunks of exactly what msgpack writes for the original value: each placeholder
    (fixext 16: 0xD8, code, marker) becomes a bin32 header followed by the lifted bytes
    themselves. None when a marker is not found exactly once."""
    found = []
    for marker, data in lifted:
        token = bytes((0xD8, _LIFT_EXT_CODE)) + marker
        at = structure.find(token)
        if at < 0 or structure.find(token, at + 1) >= 0:
            return None
        found.append((at, len(token), data))
    found.sort(key=lambda f: f[0])
    chunks: list[bytes | memoryview] = []
    position = 0
    for at, token_len, data in found:
        chunks.append(structure[position:at] + struct.pack(">BI", 0xC6, len(data)))
        chunks.append(memoryview(data))
        position = at + token_len
    if position < len(structure):
        chunks.append(structure[position:])
    return chunks


def _envelope(structure: bytes, encoder: _Encoder) -> Encoded:
    prefix_len = fmt.ENVELOPE_PREFIX.size
    # The data section starts on an ALIGNMENT boundary counted from the payload's first byte.
    data_start = (
        fmt.align_up(fmt.EXT32_HEADER.size + prefix_len + len(structure)) - fmt.EXT32_HEADER.size
    )
    body_len = data_start + encoder.data_len
    if body_len > fmt.MAX_ENVELOPE_BODY:
        raise CodecError(
            f"cannot encode {body_len} bytes of arrays in one payload: the limit is 4 GiB - 1 "
            "(one msgpack ext32 value); split the work into several jobs"
        )
    head = b"".join(
        (
            fmt.EXT32_HEADER.pack(0xC9, body_len, fmt.EXT_ENVELOPE),
            fmt.ENVELOPE_PREFIX.pack(fmt.FORMAT_VERSION, len(structure), data_start),
            structure,
            bytes(data_start - prefix_len - len(structure)),
        )
    )
    chunks = _Chunks(head)
    position = 0
    for offset, raw in encoder.blocks:
        chunks.add(bytes(offset - position))
        chunks.add(raw)
        position = offset + len(raw)
    return Encoded(chunks.finish(), tuple(encoder.blobs.values()))


class _Chunks:
    """Collects chunks, joining runs of small pieces once and keeping large ones as references."""

    def __init__(self, first: bytes) -> None:
        self.done: list[bytes | memoryview] = []
        self.pending: list[bytes | memoryview] = [first]

    def add(self, piece: bytes | memoryview) -> None:
        if not piece:
            return
        if len(piece) < _COALESCE_BELOW:
            self.pending.append(piece)
            return
        self._flush()
        self.done.append(piece)

    def _flush(self) -> None:
        if len(self.pending) == 1 and type(self.pending[0]) is bytes:
            self.done.append(self.pending[0])
        elif self.pending:
            self.done.append(b"".join(self.pending))
        self.pending = []

    def finish(self) -> list[bytes | memoryview]:
        self._flush()
        return self.done


def decode(data: bytes | bytearray | memoryview, *, copy: bool = False, zdata: bool = True) -> Any:  # noqa: C901 - one branch per wire type of the format, in the order docs/codec.md lists them
    """Decodes a payload.

    copy=False: numpy arrays larger than INLINE_MAX_BYTES are read-only views over `data` (which
    they keep alive); smaller ones are read-only too. Tensors share `data` only when it is writable.
    copy=True: every array and tensor owns writable memory.
    zdata=True: zaku `{"ztype", "b", ...}` maps are decoded to arrays, tensors and images.
    """
    try:
        view = memoryview(data)
    except TypeError as e:
        raise CodecError(f"cannot decode a {type(data).__name__}: expected bytes-like data") from e
    if view.format != "B" or view.ndim != 1:
        if not view.c_contiguous:
            raise CodecError("cannot decode a non-contiguous buffer")
        view = view.cast("B")
    if not view:
        raise CodecError("cannot decode an empty payload")
    data_section = None
    structure = view
    if len(view) >= fmt.EXT32_HEADER.size and view[0] == 0xC9 and view[5] == fmt.EXT_ENVELOPE:
        structure, data_section = _open_envelope(view)
    hook = _ExtHook(data_section, copy)
    gc_paused = len(structure) >= _GC_PAUSE_MIN and gc.isenabled()
    if gc_paused:
        gc.disable()
    try:
        return msgpack.unpackb(
            structure,
            ext_hook=hook.ext,
            object_hook=hook.zdata if zdata else None,
            raw=False,
            strict_map_key=False,
            timestamp=3,
        )
    except CodecError:
        raise
    except msgpack.ExtraData as e:
        raise CodecError("corrupt payload: bytes after the end of the msgpack value") from e
    except TypeError as e:
        # e.g. a map key that decodes to a list (a tuple key on the encoding side) is unhashable
        hint = " (map keys must be scalars)" if "unhashable" in str(e) else ""
        raise CodecError(f"cannot decode the payload: {e}{hint}") from e
    except (ValueError, msgpack.UnpackException) as e:
        raise CodecError(f"cannot decode the payload as msgpack: {e}") from e
    finally:
        if gc_paused:
            gc.enable()


def _open_envelope(view: memoryview) -> tuple[memoryview, memoryview]:
    _, body_len, _ = fmt.EXT32_HEADER.unpack_from(view, 0)
    body = view[fmt.EXT32_HEADER.size :]
    if len(body) != body_len:
        raise CodecError(
            f"corrupt payload: envelope says {body_len} bytes, {len(body)} follow its header"
        )
    if len(body) < fmt.ENVELOPE_PREFIX.size:
        raise CodecError("corrupt payload: envelope too short")
    version, structure_len, data_start = fmt.ENVELOPE_PREFIX.unpack_from(body, 0)
    if version != fmt.FORMAT_VERSION:
        raise CodecError(
            f"payload has format version {version}; this reader knows version "
            f"{fmt.FORMAT_VERSION}: upgrade payloadstore to read it"
        )
    structure_end = fmt.ENVELOPE_PREFIX.size + structure_len
    if structure_end > data_start or data_start > len(body):
        raise CodecError("corrupt payload: envelope offsets out of range")
    return body[fmt.ENVELOPE_PREFIX.size : structure_end], body[data_start:]


def _blob(payload: bytes) -> Any:
    if len(payload) != fmt.BLOB_REF.size:
        raise CodecError("corrupt payload: a blob reference that is not 16 bytes")
    from .._blobs import Blob, current_blob_list

    index, prefix, size = fmt.BLOB_REF.unpack(payload)
    shas = current_blob_list()
    if index >= len(shas):
        raise CodecError(
            f"the value references blob #{index} of its blob list, which has {len(shas)}: decode "
            "it where its job's (or result's) `blobs` are known (the SDK does)"
        )
    sha = shas[index]
    if not sha.startswith(prefix.hex()):
        raise CodecError(f"blob #{index} of the value is not {sha} of its blob list")
    return Blob(sha, size)


class _ExtHook:
    def __init__(self, data_section: memoryview | None, copy: bool) -> None:
        self.data_section = data_section
        self.copy = copy

    def ext(self, code: int, payload: bytes) -> Any:
        if code == fmt.EXT_BLOB:
            return _blob(payload)
        if code not in _KIND_NAMES:
            if code == fmt.EXT_ENVELOPE:
                raise CodecError(
                    "corrupt payload: an envelope ext value that is not the whole payload"
                )
            raise CodecError(
                f"payload holds msgpack ext type {code}, which payloadstore does not know "
                f"(known: {sorted(_KIND_NAMES)} and the msgpack timestamp)"
            )
        kind = _KIND_NAMES[code]
        header, inline = fmt.read_ext_payload(kind, payload)
        if inline is None:
            raw, view = self._block(kind, header), True
        else:
            raw, view = inline, False
        return _kind_module(code).from_header(header, raw, view=view, copy=self.copy)

    def _block(self, kind: str, header: dict) -> memoryview:
        if self.data_section is None:
            raise CodecError(
                f"corrupt payload: {kind} value refers to a data section that is absent"
            )
        offset, length = header.get("off"), header.get("len")
        if (
            type(offset) is not int
            or type(length) is not int
            or offset < 0
            or length < 0
            or offset + length > len(self.data_section)
        ):
            raise CodecError(f"corrupt payload: {kind} value's data block is out of range")
        return self.data_section[offset : offset + length]

    def zdata(self, mapping: dict) -> Any:
        ztype = mapping.get("ztype")
        if (
            not isinstance(ztype, str)
            or not isinstance(mapping.get("b"), bytes)
            or not mapping.keys() <= _ZDATA_KEYS
        ):
            return mapping
        kind = _ZTYPES.get(ztype)
        if kind is None:
            return mapping
        return _kind_module(kind).from_zdata(mapping, copy=self.copy)
