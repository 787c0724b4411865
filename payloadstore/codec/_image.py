"""PIL images <-> EXT_IMAGE: mode, size and the raw pixel bytes (lossless, no re-compression).

Palette images (P, PA) carry their palette and a `transparency` entry when present. Other
`Image.info` entries (EXIF, ICC profile, format) and further frames of animated images are not
carried: the value is the pixels of the current frame.
"""

from __future__ import annotations

import io
from typing import Any

from PIL import Image

from ._format import CodecError


def to_header_and_bytes(value: Any) -> tuple[dict[str, Any], bytes]:
    try:
        raw = value.tobytes()
    except (OSError, ValueError) as e:
        raise CodecError(f"cannot read the pixels of a PIL image (mode {value.mode}): {e}") from e
    header: dict[str, Any] = {"mode": value.mode, "size": list(value.size)}
    if value.mode in ("P", "PA") and value.palette is not None:
        palette_mode = value.palette.mode
        palette = value.getpalette(palette_mode)
        if palette:
            header["palette"] = [palette_mode, bytes(palette)]
    transparency = value.info.get("transparency")
    if isinstance(transparency, (int, bytes)):
        header["transparency"] = transparency
    elif isinstance(transparency, tuple) and all(isinstance(v, int) for v in transparency):
        header["transparency"] = list(transparency)
    return header, raw


def from_header(header: dict[str, Any], raw: memoryview, *, view: bool, copy: bool) -> Any:
    """Builds the image; pixels are always copied into Pillow's own memory."""
    mode, size = header.get("mode"), header.get("size")
    if (
        not isinstance(mode, str)
        or not isinstance(size, list)
        or len(size) != 2
        or not all(type(v) is int and v >= 0 for v in size)
    ):
        raise CodecError(f"image ext value has an invalid mode/size {mode!r}/{size!r}")
    try:
        image = Image.frombytes(mode, tuple(size), raw)
        palette = header.get("palette")
        if palette is not None:
            palette_mode, palette_bytes = palette
            image.putpalette(palette_bytes, rawmode=palette_mode)
    except (ValueError, TypeError, OSError) as e:
        raise CodecError(f"image ext value is corrupt (mode {mode}, size {size}): {e}") from e
    transparency = header.get("transparency")
    if transparency is not None:
        image.info["transparency"] = (
            tuple(transparency) if isinstance(transparency, list) else transparency
        )
    return image


def from_zdata(zdata: dict[str, Any], *, copy: bool) -> Any:
    """zaku's `{"ztype": "image", "b"}`: `b` is an encoded image file (PNG unless it said otherwise)."""
    raw = zdata.get("b")
    if not isinstance(raw, bytes):
        raise CodecError("zaku image map has no bytes under 'b'")
    try:
        image = Image.open(io.BytesIO(raw))
        image.load()
    except (OSError, ValueError, Image.DecompressionBombError) as e:
        raise CodecError(f"zaku image map holds no readable image: {e}") from e
    return image
