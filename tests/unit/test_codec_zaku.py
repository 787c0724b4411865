"""Payloads written by zaku clients (ZData maps) decode to arrays, tensors and images."""

from __future__ import annotations

import io
from pathlib import Path

import msgpack
import numpy as np
import pytest
import torch
from PIL import Image

from payloadstore import codec
from tests.unit.fixtures.zaku.zaku_values import zaku_values

FIXTURES = Path(__file__).parent / "fixtures" / "zaku"


def _zdata(array: np.ndarray, ztype: str = "numpy.ndarray") -> dict:
    """A map shaped as zaku's ZData.encode writes it."""
    return {"ztype": ztype, "b": array.tobytes(), "dtype": str(array.dtype), "shape": array.shape}


def test_payload_serialized_by_zaku_decodes_to_the_original_values():
    # Given bytes written by zaku 0.0.18's Payload.serialize()
    data = (FIXTURES / "payload_greedy.msgpack").read_bytes()
    want = zaku_values()

    # When decoded
    got = codec.decode(data)

    # Then arrays keep dtype (byte order included) and shape, tensors keep their dtype, the image
    # its pixels; zaku's own `_greedy` marker stays as a plain key
    for name in ("matrix", "big_endian", "flags"):
        assert got[name].dtype.str == want[name].dtype.str
        np.testing.assert_array_equal(got[name], want[name])
    for name in ("tensor", "tensor_int"):
        assert got[name].dtype == want[name].dtype
        assert torch.equal(got[name], want[name])
    assert got["image"].mode == "RGB" and got["image"].tobytes() == want["image"].tobytes()
    assert (got["text"], got["count"], got["_greedy"]) == ("hello", 3, True)


def test_zaku_maps_nested_anywhere_are_decoded():
    # Given zaku maps inside lists and dicts (zaku itself only converts top-level values)
    png = io.BytesIO()
    Image.new("L", (2, 2), 200).save(png, format="PNG")
    value = {
        "batch": [_zdata(np.arange(4, dtype="<u2")), {"mask": _zdata(np.eye(2, dtype=bool))}],
        "frame": {"ztype": "image", "b": png.getvalue()},
    }

    # When decoded
    got = codec.decode(msgpack.packb(value, use_bin_type=True))

    # Then each map became its value
    np.testing.assert_array_equal(got["batch"][0], np.arange(4, dtype="<u2"))
    np.testing.assert_array_equal(got["batch"][1]["mask"], np.eye(2, dtype=bool))
    assert got["frame"].mode == "L" and got["frame"].getpixel((1, 1)) == 200


def test_zaku_arrays_follow_the_copy_option():
    # Given a zaku array map
    data = msgpack.packb({"a": _zdata(np.arange(3.0))}, use_bin_type=True)

    # When decoded with and without copy
    viewed, copied = codec.decode(data)["a"], codec.decode(data, copy=True)["a"]

    # Then the default is read-only and copy=True is writable, as for native arrays
    assert not viewed.flags.writeable
    assert copied.flags.writeable


def test_maps_that_only_look_like_zdata_stay_maps():
    # Given a user map with a ztype key but extra keys, and one with an unknown ztype
    value = {
        "x": {"ztype": "numpy.ndarray", "b": b"", "note": "mine"},
        "y": {"ztype": "other", "b": b""},
    }
    data = msgpack.packb(value, use_bin_type=True)

    # When decoded
    got = codec.decode(data)

    # Then they are returned unchanged
    assert got == value


def test_zdata_false_leaves_zaku_maps_alone():
    # Given a zaku array map
    value = {"a": _zdata(np.arange(3))}
    data = msgpack.packb(value, use_bin_type=True)

    # When decoded with zdata=False
    got = codec.decode(data, zdata=False)

    # Then it is the plain map (tuples as lists)
    assert got["a"]["ztype"] == "numpy.ndarray" and got["a"]["shape"] == [3]


@pytest.mark.parametrize(
    ("zmap", "message"),
    [
        (
            {"ztype": "numpy.ndarray", "b": b"\0" * 8, "dtype": "object", "shape": [1]},
            "Python objects",
        ),
        (
            {"ztype": "numpy.ndarray", "b": b"\0" * 3, "dtype": "float32", "shape": [1]},
            "needs 4 bytes",
        ),
        ({"ztype": "image", "b": b"not a png"}, "no readable image"),
    ],
    ids=["object_dtype", "short", "bad_image"],
)
def test_unsafe_or_broken_zaku_maps_are_refused(zmap, message):
    # Given a zaku map with an object dtype, too few bytes or a broken image
    # When decoded, Then CodecError says why (an object dtype over raw bytes would be unsafe)
    with pytest.raises(codec.CodecError, match=message):
        codec.decode(msgpack.packb({"v": zmap}, use_bin_type=True))
