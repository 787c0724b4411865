"""numpy through the codec: every numeric dtype bit-exact, layouts, zero-copy views and refusals."""

from __future__ import annotations

import numpy as np
import pytest

from payloadstore import codec

NUMERIC_DTYPES = [
    "|b1",
    "|i1",
    "|u1",
    "<i2",
    "<u2",
    "<i4",
    "<u4",
    "<i8",
    "<u8",
    "<f2",
    "<f4",
    "<f8",
    np.dtype(np.longdouble).str,
    "<c8",
    "<c16",
    np.dtype(np.clongdouble).str,
    "<M8[ns]",
    "<M8[D]",
    "<m8[us]",
    ">i2",
    ">u4",
    ">i8",
    ">f2",
    ">f4",
    ">f8",
    ">c16",
    ">M8[s]",
    ">m8[ms]",
]
OTHER_DTYPES = ["<U5", "|S3", "|V4"]


def _random_array(dtype_str: str, shape: tuple[int, ...], seed: int = 7) -> np.ndarray:
    """Random bit patterns (NaN payloads, subnormals, NaT included) so equality means bit-exact."""
    dtype = np.dtype(dtype_str)
    count = int(np.prod(shape))
    raw = np.random.default_rng(seed).integers(0, 256, size=count * dtype.itemsize, dtype=np.uint8)
    if dtype.kind == "b":
        raw = raw % 2
    if dtype.kind == "U":
        raw = np.frombuffer(
            np.array(["héllo", "ab", "", "z" * 5], dtype="<U5").tobytes() * count, np.uint8
        )
        raw = raw[: count * dtype.itemsize]
    return np.frombuffer(raw.tobytes(), dtype=dtype).reshape(shape)


def _round_trip(value, **decode_options):
    return codec.decode(codec.encode(value).tobytes(), **decode_options)


def _assert_bit_exact(decoded: np.ndarray, original: np.ndarray) -> None:
    assert type(decoded) is np.ndarray
    assert decoded.dtype.str == original.dtype.str
    assert decoded.shape == original.shape
    assert decoded.tobytes() == original.tobytes()


@pytest.mark.parametrize("dtype_str", NUMERIC_DTYPES + OTHER_DTYPES)
@pytest.mark.parametrize("shape", [(3,), (600, 7)], ids=["inline", "out_of_band"])
def test_every_dtype_round_trips_bit_exact(dtype_str, shape):
    # Given an array of random bit patterns in this dtype, small (inline) or large (data section)
    original = _random_array(dtype_str, shape)

    # When round-tripped
    decoded = _round_trip({"value": original})["value"]

    # Then dtype string (byte order included), shape and every byte are unchanged
    _assert_bit_exact(decoded, original)


@pytest.mark.parametrize("dtype_str", ["<f4", ">f8", "<M8[ns]", "|b1", "<c8"])
@pytest.mark.parametrize(
    "shape", [(), (0,), (0, 3), (4, 0, 2)], ids=["0d", "empty", "empty2d", "empty3d"]
)
def test_zero_dimensional_and_empty_arrays_keep_shape_and_dtype(dtype_str, shape):
    # Given a 0-d or empty array
    original = _random_array(dtype_str, shape)

    # When round-tripped
    decoded = _round_trip([original])[0]

    # Then it is still an ndarray of that shape and dtype (not a scalar, not 1-d)
    _assert_bit_exact(decoded, original)


@pytest.mark.parametrize(
    "make_view",
    [
        lambda a: a.T,
        lambda a: a[::2, 1::3],
        lambda a: a[:, ::-1],
        lambda a: np.asfortranarray(a),
        lambda a: np.broadcast_to(a[:1], a.shape),
    ],
    ids=["transposed", "strided", "reversed", "fortran", "broadcast"],
)
def test_non_contiguous_arrays_arrive_as_c_order_copies_of_their_values(make_view):
    # Given a non-C-contiguous view of a large array
    view = make_view(np.arange(300 * 40, dtype=">i4").reshape(300, 40))
    assert not view.flags.c_contiguous

    # When round-tripped
    decoded = _round_trip(view)

    # Then the values, shape and dtype match and the result is C-contiguous
    assert decoded.flags.c_contiguous
    assert decoded.dtype.str == ">i4"
    np.testing.assert_array_equal(decoded, view)


@pytest.mark.parametrize(
    "scalar",
    [
        np.float32(1.5),
        np.float64(-0.0),
        np.int64(-(2**62)),
        np.uint8(255),
        np.bool_(True),
        np.complex64(1 - 2j),
        np.float16(0.1),
        np.datetime64("2026-01-02T03:04:05.123456789"),
        np.str_("héllo"),
    ],
    ids=lambda s: type(s).__name__,
)
def test_numpy_scalars_come_back_as_numpy_scalars_of_the_same_type(scalar):
    # Given a numpy scalar (np.float64 is also a Python float subclass)
    # When round-tripped
    decoded = _round_trip({"x": scalar})["x"]

    # Then its numpy type and bits are kept
    assert type(decoded) is type(scalar)
    assert decoded.tobytes() == scalar.tobytes()


def test_large_array_decodes_as_a_read_only_view_over_the_input_buffer():
    # Given the bytes of a payload holding a 4 MiB array
    original = np.random.default_rng(1).random((1024, 512), dtype=np.float64)
    data = codec.encode({"w": original}).tobytes()

    # When decoded with the default copy=False
    decoded = codec.decode(data)["w"]

    # Then the array shares the payload's memory and cannot be written
    assert np.shares_memory(decoded, np.frombuffer(data, dtype=np.uint8))
    assert not decoded.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        decoded[0, 0] = 1.0
    np.testing.assert_array_equal(decoded, original)


def test_view_over_a_bytearray_is_still_read_only_and_sees_the_buffer():
    # Given a payload received into a writable bytearray
    buffer = bytearray(codec.encode(np.arange(4096, dtype=np.int32)).tobytes())

    # When decoded without copying
    decoded = codec.decode(buffer)

    # Then it is a read-only view: changing the buffer shows through
    assert not decoded.flags.writeable
    offset = bytes(buffer).index(np.int32(4095).tobytes())
    buffer[offset : offset + 4] = np.int32(-7).tobytes()
    assert decoded[-1] == -7


def test_copy_true_gives_writable_arrays_that_own_their_memory():
    # Given a payload with a large and a small array
    data = codec.encode({"big": np.ones(100_000, dtype=np.float32), "small": np.ones(3)}).tobytes()

    # When decoded with copy=True
    decoded = codec.decode(data, copy=True)

    # Then both arrays are writable and share nothing with the payload
    for array in decoded.values():
        assert array.flags.writeable and array.flags.owndata
        assert not np.shares_memory(array, np.frombuffer(data, dtype=np.uint8))
        array[0] = 5


def test_small_arrays_are_read_only_too_with_copy_false():
    # Given a payload with an inline (small) array
    # When decoded with copy=False
    decoded = _round_trip(np.arange(4))

    # Then the flags match the large-array case: read-only
    assert not decoded.flags.writeable


def test_arrays_nested_anywhere_round_trip():
    # Given arrays inside lists, tuples and dicts, several levels deep
    big = np.arange(50_000, dtype=np.int16)
    value = {"a": [1, (np.float32(2), {"deep": [[big, {"x": np.eye(2)}]]})], "b": (big[::5],)}

    # When round-tripped
    decoded = _round_trip(value)

    # Then each array is at its place (tuples as lists)
    np.testing.assert_array_equal(decoded["a"][1][1]["deep"][0][0], big)
    np.testing.assert_array_equal(decoded["a"][1][1]["deep"][0][1]["x"], np.eye(2))
    np.testing.assert_array_equal(decoded["b"][0], big[::5])
    assert decoded["a"][0] == 1 and decoded["a"][1][0] == np.float32(2)


def test_encoding_reads_the_array_memory_without_copying_it():
    # Given a C-contiguous array
    array = np.zeros(1_000_000, dtype=np.uint8)

    # When encoded and the array changed afterwards
    encoded = codec.encode(array)
    array[:] = 9

    # Then the payload sees the change: it references, not copies (the documented contract)
    assert codec.decode(encoded.tobytes())[0] == 9


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (np.array([1, "a", None], dtype=object), "dtype object: it holds Python objects"),
        (np.zeros(3, dtype=[("x", "<f4"), ("y", "<i2")]), "structured dtype"),
        (np.ma.masked_array([1, 2], mask=[0, 1]), "masked array"),
    ],
    ids=["object", "structured", "masked"],
)
def test_arrays_without_a_plain_byte_layout_are_refused_clearly(value, message):
    # Given an array whose elements are not plain bytes (or whose mask would be lost)
    # When encoded inside a structure, Then CodecError says what to do instead
    with pytest.raises(codec.CodecError, match=message):
        codec.encode({"args": [value]})
