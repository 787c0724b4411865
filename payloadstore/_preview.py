"""A bounded, readable preview of a stored payload, for operators (`payloadstore status
--show-args`, the dashboard): msgpack to text, numpy arrays, tensors and images as their shape and
dtype, everything truncated.

Safe on any bytes: nothing is executed or unpickled (the codec has no pickle at all), no array is
built (an ext value's header is read, never its data), numpy/torch/Pillow are never imported, and
the text is cut at `max_chars`. A payload with large values (the codec's envelope) is previewed
from its structure alone: the data section is not read, so only the first bytes of a large S3
object are needed (`needed_prefix`).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any

import httpx
import msgpack

from .codec import _format as fmt

# What a preview shows at most.
MAX_CHARS = 4000
MAX_ITEMS = 20  # list items / map entries per container
MAX_STRING = 200  # characters of one string
MAX_BYTES_SHOWN = 24  # bytes of one bytes value
MAX_DEPTH = 8
# The structure of a payload read for a preview, at most (an S3 object's first bytes are fetched).
MAX_STRUCTURE_BYTES = 1024 * 1024

# The first bytes of a payload that tell how many a preview needs (needed_prefix).
HEAD_BYTES = fmt.EXT32_HEADER.size + fmt.ENVELOPE_PREFIX.size

_ZDATA_KINDS = {"numpy.ndarray": "ndarray", "torch.Tensor": "tensor", "image": "image"}


@dataclass(frozen=True)
class Preview:
    """`text`: the readable value; `truncated`: something was cut; `error`: why there is no
    preview (then `text` is empty)."""

    text: str
    truncated: bool = False
    error: str | None = None


class _Described:
    """A value shown by a description, not by its contents (an array, a blob reference)."""

    def __init__(self, text: str):
        self.text = text


def _shape(header: dict) -> str:
    shape = header.get("shape")
    if isinstance(shape, list) and all(type(d) is int for d in shape):
        return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"
    return "?"


def _ext(code: int, data: bytes) -> Any:
    kinds = {fmt.EXT_NDARRAY: "ndarray", fmt.EXT_TORCH: "tensor", fmt.EXT_IMAGE: "image"}
    if code in kinds:
        kind = kinds[code]
        try:
            header, inline = fmt.read_ext_payload(kind, data)
        except fmt.CodecError as e:
            return _Described(f"<{kind}: unreadable header: {e}>")
        nbytes = len(inline) if inline is not None else header.get("len")
        size = f", {nbytes} bytes" if isinstance(nbytes, int) else ""
        if code == fmt.EXT_IMAGE:
            dims = header.get("size")
            shown = "x".join(str(d) for d in dims) if isinstance(dims, list) else "?"
            return _Described(f"<image mode={header.get('mode')} size={shown}{size}>")
        scalar = " scalar" if header.get("scalar") else ""
        return _Described(
            f"<{kind}{scalar} shape={_shape(header)} dtype={header.get('dtype')}{size}>"
        )
    if code == fmt.EXT_BLOB and len(data) == fmt.BLOB_REF.size:
        index, prefix, size = fmt.BLOB_REF.unpack(data)
        return _Described(f"<blob #{index} sha256={prefix.hex()}… {size} bytes>")
    if code == fmt.EXT_ENVELOPE:
        return _Described("<nested envelope>")
    return _Described(f"<ext type {code}, {len(data)} bytes>")


def _zdata(mapping: dict) -> Any:
    ztype = mapping.get("ztype")
    if isinstance(ztype, str) and ztype in _ZDATA_KINDS and isinstance(mapping.get("b"), bytes):
        kind = _ZDATA_KINDS[ztype]
        return _Described(
            f"<{kind} shape={_shape(mapping)} dtype={mapping.get('dtype')}, "
            f"{len(mapping['b'])} bytes>"
        )
    return mapping


def needed_prefix(head: bytes) -> int | None:
    """How many first bytes of a payload its preview needs, from its first HEAD_BYTES: the whole
    structure of an envelope (its data section is never read), None for plain msgpack (all of
    it) or bytes too short to tell."""
    if len(head) >= HEAD_BYTES and head[0] == 0xC9:
        _, _, code = fmt.EXT32_HEADER.unpack_from(head, 0)
        if code == fmt.EXT_ENVELOPE:
            _, structure_len, _ = fmt.ENVELOPE_PREFIX.unpack_from(head, fmt.EXT32_HEADER.size)
            return fmt.EXT32_HEADER.size + fmt.ENVELOPE_PREFIX.size + structure_len
    return None


def _structure(data: bytes) -> tuple[bytes, bool]:
    """The msgpack bytes to read, and whether they are an envelope's structure."""
    prefix = needed_prefix(data[:HEAD_BYTES])
    if prefix is None:
        return data, False
    if prefix > len(data):
        raise ValueError(f"the payload's structure is {prefix} bytes, only {len(data)} were read")
    return data[HEAD_BYTES:prefix], True


class _Writer:
    def __init__(self, max_chars: int):
        self.parts: list[str] = []
        self.size = 0
        self.max_chars = max_chars
        self.truncated = False

    def put(self, text: str) -> None:
        if self.size >= self.max_chars:
            self.truncated = True
            return
        left = self.max_chars - self.size
        if len(text) > left:
            text = text[:left]
            self.truncated = True
        self.parts.append(text)
        self.size += len(text)

    @property
    def full(self) -> bool:
        return self.size >= self.max_chars


def _write(value: Any, out: _Writer, depth: int) -> None:  # noqa: C901 - one branch per type
    if out.full:
        out.truncated = True
        return
    if isinstance(value, _Described):
        out.put(value.text)
    elif isinstance(value, str):
        shown = value if len(value) <= MAX_STRING else value[:MAX_STRING]
        out.put(repr(shown))
        if len(value) > MAX_STRING:
            out.put(f"…({len(value)} chars)")
            out.truncated = True
    elif isinstance(value, bytes):
        out.put(repr(value[:MAX_BYTES_SHOWN]))
        if len(value) > MAX_BYTES_SHOWN:
            out.put(f"…({len(value)} bytes)")
            out.truncated = True
    elif isinstance(value, datetime.datetime):
        out.put(value.isoformat())
    elif isinstance(value, (list, tuple)):
        if depth >= MAX_DEPTH:
            out.put(f"[…{len(value)} items]")
            out.truncated = True
            return
        out.put("[")
        for i, item in enumerate(value[:MAX_ITEMS]):
            if i:
                out.put(", ")
            _write(item, out, depth + 1)
        if len(value) > MAX_ITEMS:
            out.put(f", …({len(value) - MAX_ITEMS} more)")
            out.truncated = True
        out.put("]")
    elif isinstance(value, dict):
        if depth >= MAX_DEPTH:
            out.put(f"{{…{len(value)} entries}}")
            out.truncated = True
            return
        out.put("{")
        for i, (key, item) in enumerate(list(value.items())[:MAX_ITEMS]):
            if i:
                out.put(", ")
            _write(key, out, depth + 1)
            out.put(": ")
            _write(item, out, depth + 1)
        if len(value) > MAX_ITEMS:
            out.put(f", …({len(value) - MAX_ITEMS} more)")
            out.truncated = True
        out.put("}")
    elif value is None or isinstance(value, (bool, int, float)):
        out.put(repr(value))
    else:  # nothing else comes out of msgpack with the hooks above
        out.put(f"<{type(value).__name__}>")


def preview(data: bytes, *, max_chars: int = MAX_CHARS) -> Preview:
    """The readable text of a payload (a job's arguments or result), at most `max_chars`."""
    try:
        structure, _ = _structure(bytes(data))
        if len(structure) > MAX_STRUCTURE_BYTES:
            return Preview("", error=f"the structure is {len(structure)} bytes: download it")
        value = msgpack.unpackb(
            structure,
            ext_hook=_ext,
            object_hook=_zdata,
            raw=False,
            strict_map_key=False,
            timestamp=3,
        )
    except (ValueError, TypeError, msgpack.UnpackException, RecursionError) as e:
        return Preview("", error=f"not a payloadstore msgpack value ({type(e).__name__}: {e})")
    out = _Writer(max_chars)
    _write(value, out, 0)
    return Preview("".join(out.parts), truncated=out.truncated)


# An S3 value is fetched whole for its preview up to this size; above it only the first
# HEAD_BYTES (and, for the codec's envelope, its structure) are read with ranged GETs.
FETCH_WHOLE_MAX = 1024 * 1024


def _refused(status: int) -> str:
    if status in (403, 404):
        # A presigned GET of a deleted key: 404, or 403 where the signer may not list the bucket.
        return f"S3 answered {status}: the object is gone (retention consume, or lifecycle)"
    return f"S3 answered {status}"


def fetch_for_preview(http: Any, url: str, size: int | None) -> tuple[bytes | None, str | None]:
    """The bytes of an S3 value its preview needs, through its presigned GET (`http` an
    httpx.Client that sends no credentials of its own: the URL is the grant). Returns (bytes,
    None), or (None, why not)."""
    if size is not None and size <= FETCH_WHOLE_MAX:
        response = http.get(url)
        if response.status_code != 200:
            return None, _refused(response.status_code)
        return response.content[:FETCH_WHOLE_MAX], None
    head = http.get(url, headers={"Range": f"bytes=0-{HEAD_BYTES - 1}"})
    if head.status_code not in (200, 206):
        return None, _refused(head.status_code)
    needed = needed_prefix(head.content[:HEAD_BYTES])
    if needed is None:
        return None, f"{size} bytes of plain msgpack: too large to preview, download it"
    if needed > MAX_STRUCTURE_BYTES:
        return None, f"the structure is {needed} bytes: too large to preview, download it"
    body = http.get(url, headers={"Range": f"bytes=0-{needed - 1}"})
    if body.status_code not in (200, 206):
        return None, _refused(body.status_code)
    return body.content[:needed], None


def describe(stored: Any, http: Any, *, max_chars: int = MAX_CHARS) -> dict[str, Any]:
    """A job's arguments or result (`payloadstore._wire.StoredPayload`) as plain JSON-ready
    facts and a preview: `tier`, `size`, `content_type`, `gone`, `bucket`/`key` (S3),
    `preview` (text), `truncated`, `preview_error`. Never holds a URL."""
    facts: dict[str, Any] = {
        "tier": stored.tier,
        "size": stored.size,
        "content_type": stored.content_type,
        "gone": stored.gone,
    }
    if stored.ref:
        facts["bucket"] = stored.ref.get("bucket")
        facts["key"] = stored.ref.get("key")
    data: bytes | None = stored.inline
    error = None
    if data is None and stored.download_url and not stored.gone:
        try:
            data, error = fetch_for_preview(http, stored.download_url, stored.size)
        except httpx.HTTPError as e:  # the preview is a courtesy: the facts still show
            data, error = None, f"could not read it from S3 ({type(e).__name__})"
    if data is not None:
        shown = preview(data, max_chars=max_chars)
        facts.update(preview=shown.text, truncated=shown.truncated, preview_error=shown.error)
    elif error or stored.gone:
        facts.update(preview=None, truncated=False, preview_error=error)
    return facts
