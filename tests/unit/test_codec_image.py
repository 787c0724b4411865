"""PIL images through the codec: mode, size and pixels kept exactly, palettes included."""

from __future__ import annotations

import random

import msgpack
import pytest
from PIL import Image

from payloadstore import codec


def _random_image(mode: str, size: tuple[int, int], seed: int = 5) -> Image.Image:
    """An image whose raw bytes are random, so equal bytes mean lossless."""
    blank = Image.new(mode, size)
    length = len(blank.tobytes())
    rng = random.Random(seed)
    return Image.frombytes(mode, size, bytes(rng.randrange(256) for _ in range(length)))


def _round_trip(value, **decode_options):
    return codec.decode(codec.encode(value).tobytes(), **decode_options)


def _assert_same_pixels(decoded: Image.Image, original: Image.Image) -> None:
    assert isinstance(decoded, Image.Image)
    assert decoded.mode == original.mode
    assert decoded.size == original.size
    assert decoded.tobytes() == original.tobytes()


@pytest.mark.parametrize("mode", ["L", "RGB", "RGBA", "I;16", "1", "LA", "I", "F", "CMYK", "YCbCr"])
@pytest.mark.parametrize("size", [(4, 3), (97, 61)], ids=["inline", "out_of_band"])
def test_modes_round_trip_losslessly(mode, size):
    # Given an image of random pixels in this mode, small (inline) or large (data section)
    original = _random_image(mode, size)

    # When round-tripped
    decoded = _round_trip({"image": original})["image"]

    # Then mode, size and every pixel byte are unchanged
    _assert_same_pixels(decoded, original)


@pytest.mark.parametrize("palette_mode", ["RGB", "RGBA"])
def test_palette_image_keeps_its_palette_and_transparency(palette_mode):
    # Given a P image with its own palette and a transparent index
    original = _random_image("P", (50, 40))
    entries = bytes(random.Random(1).randrange(256) for _ in range(256 * len(palette_mode)))
    original.putpalette(entries, rawmode=palette_mode)
    original.info["transparency"] = 7

    # When round-tripped
    decoded = _round_trip(original)

    # Then the indices, the palette and the transparent index are the same, so colours match too
    _assert_same_pixels(decoded, original)
    assert decoded.palette.mode == palette_mode
    assert decoded.getpalette(palette_mode) == original.getpalette(palette_mode)
    assert decoded.info["transparency"] == 7
    assert decoded.convert("RGBA").tobytes() == original.convert("RGBA").tobytes()


def test_opened_png_round_trips_its_pixels():
    # Given an image opened lazily from PNG bytes (not yet loaded)
    import io

    buffer = io.BytesIO()
    _random_image("RGB", (30, 20)).save(buffer, format="PNG")
    opened = Image.open(io.BytesIO(buffer.getvalue()))

    # When round-tripped
    decoded = _round_trip(opened)

    # Then the decoded pixels equal the file's
    _assert_same_pixels(decoded, opened)


def test_empty_image_round_trips():
    # Given a 0x0 image
    original = Image.new("RGB", (0, 0))

    # When round-tripped
    decoded = _round_trip(original)

    # Then it is a 0x0 RGB image
    _assert_same_pixels(decoded, original)


def test_images_nested_in_lists_and_dicts_round_trip():
    # Given several images inside a list inside a dict
    frames = [_random_image("RGB", (64, 48), seed=i) for i in range(3)]

    # When round-tripped
    decoded = _round_trip({"frames": frames, "fps": 30})

    # Then each frame is in its place
    for got, want in zip(decoded["frames"], frames, strict=True):
        _assert_same_pixels(got, want)
    assert decoded["fps"] == 30


def test_image_with_too_few_pixel_bytes_is_refused():
    # Given an image ext value whose pixel bytes are one short of 4x3 RGB
    header = {"mode": "RGB", "size": [4, 3], "b": bytes(35)}
    payload = bytes((codec.FORMAT_VERSION,)) + msgpack.packb(header)
    data = msgpack.packb(msgpack.ExtType(codec.EXT_IMAGE, payload))

    # When decoded, Then CodecError says the image is corrupt
    with pytest.raises(codec.CodecError, match="image ext value is corrupt"):
        codec.decode(data)
