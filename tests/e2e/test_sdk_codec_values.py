"""numpy arrays, torch tensors and PIL images through the whole stack (client -> CP -> daemon ->
result), inline and via S3, checked value for value and dtype for dtype by the receiving side."""

from __future__ import annotations

import numpy as np
import pytest

from tests.e2e.sdk_helpers import clients, daemon_thread, unique_queue

pytestmark = pytest.mark.e2e

torch = pytest.importorskip("torch", reason="torch is in the dev extra")
Image = pytest.importorskip("PIL.Image", reason="Pillow is in the dev extra")


def describe(value):
    """What the daemon saw, in plain types, so the client can check the daemon's view too."""
    if isinstance(value, np.ndarray):
        return {"kind": "ndarray", "dtype": value.dtype.str, "shape": list(value.shape)}
    if isinstance(value, torch.Tensor):
        return {"kind": "tensor", "dtype": str(value.dtype), "shape": list(value.shape)}
    if isinstance(value, Image.Image):
        return {"kind": "image", "mode": value.mode, "size": list(value.size)}
    if isinstance(value, dict):
        return {k: describe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [describe(v) for v in value]
    return type(value).__name__


def echo(value):
    return {"echo": value, "seen": describe(value)}


@pytest.fixture(scope="module")
def echo_queue(local_gateway):
    client, daemon_client = clients(local_gateway)
    queue = unique_queue("codec")
    with daemon_thread(daemon_client, queue, echo):
        yield client, queue


def round_trip(echo_queue, value):
    client, queue = echo_queue
    job = client.queue(queue).add(value)
    out = job.result(timeout=60)
    return job, out["echo"], out["seen"]


def assert_same_array(got: np.ndarray, sent: np.ndarray) -> None:
    assert isinstance(got, np.ndarray)
    assert got.dtype.str == sent.dtype.str and got.shape == sent.shape
    assert got.tobytes() == np.ascontiguousarray(sent).tobytes(), "bit-exact, NaNs included"


NUMERIC = [
    "|i1",
    "<i2",
    "<i4",
    "<i8",
    "|u1",
    "<u2",
    "<u4",
    "<u8",
    "<f2",
    "<f4",
    "<f8",
    np.dtype(np.longdouble).str,
    "<c8",
    "<c16",
    np.dtype(np.clongdouble).str,
    "|b1",
    "<M8[ns]",
    "<M8[D]",
    "<m8[s]",
    ">i4",
    ">u2",
    ">f8",
    ">c16",
]


@pytest.mark.parametrize("dtype", NUMERIC)
def test_given_an_array_of_each_dtype_when_round_tripped_then_dtype_shape_and_bits_survive(
    echo_queue, dtype
):
    rng = np.random.default_rng(7)
    raw = rng.integers(0, 255, size=3 * 5 * np.dtype(dtype).itemsize, dtype=np.uint8)
    sent = raw.view(np.dtype(dtype)).reshape(3, 5)
    _, got, seen = round_trip(echo_queue, sent)
    assert_same_array(got, sent)
    assert seen == {"kind": "ndarray", "dtype": sent.dtype.str, "shape": [3, 5]}


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(
            lambda: np.arange(60, dtype=np.float64).reshape(6, 10)[::2, ::3], id="non-contiguous"
        ),
        pytest.param(
            lambda: np.asfortranarray(np.arange(12, dtype=np.int32).reshape(3, 4)),
            id="fortran-order",
        ),
        pytest.param(lambda: np.array(3.25), id="0-d"),
        pytest.param(lambda: np.zeros((0, 3), dtype=np.float32), id="empty"),
        pytest.param(lambda: np.full((512, 256), np.nan, dtype=np.float32), id="nan-large-s3"),
    ],
)
def test_given_awkward_arrays_when_round_tripped_then_values_survive(echo_queue, make):
    sent = make()
    job, got, _ = round_trip(echo_queue, sent)
    assert_same_array(got, sent)
    assert job.tier == ("s3" if sent.nbytes > 262_144 else "inline")


def test_given_an_object_array_when_added_then_a_clear_codec_error_and_nothing_is_sent(echo_queue):
    from payloadstore.codec import CodecError

    client, queue = echo_queue
    with pytest.raises(CodecError, match="object"):
        client.queue(queue).add(np.array([{"a": 1}], dtype=object))


@pytest.mark.parametrize(
    "dtype", ["bfloat16", "float16", "float32", "bool", "int8", "uint8", "int64", "complex64"]
)
def test_given_a_tensor_of_each_dtype_when_round_tripped_then_it_is_bit_exact(echo_queue, dtype):
    torch_dtype = getattr(torch, dtype)
    generator = torch.Generator().manual_seed(3)
    sent = (torch.randn(4, 6, generator=generator) * 50).to(torch_dtype)
    _, got, seen = round_trip(echo_queue, sent)
    assert isinstance(got, torch.Tensor) and got.dtype == torch_dtype and tuple(got.shape) == (4, 6)
    assert seen == {"kind": "tensor", "dtype": str(torch_dtype), "shape": [4, 6]}
    assert bytes(got.contiguous().view(torch.uint8).numpy()) == bytes(
        sent.contiguous().view(torch.uint8).numpy()
    )


def test_given_a_large_bfloat16_tensor_when_round_tripped_then_it_goes_through_s3_bit_exact(
    echo_queue,
):
    sent = torch.randn(1024, 1024, generator=torch.Generator().manual_seed(5)).to(torch.bfloat16)
    job, got, _ = round_trip(echo_queue, sent)
    assert job.tier == "s3"
    assert got.dtype == torch.bfloat16
    assert torch.equal(got.view(torch.int16), sent.view(torch.int16))


@pytest.mark.parametrize("mode", ["L", "RGB", "RGBA", "I;16"])
def test_given_an_image_of_each_mode_when_round_tripped_then_mode_size_and_pixels_survive(
    echo_queue, mode
):
    size = (37, 23)
    bands = len(Image.new(mode, (1, 1)).getbands())
    width = 2 if mode == "I;16" else 1
    pixels = (
        np.random.default_rng(11)
        .integers(0, 256, size=size[0] * size[1] * bands * width, dtype=np.uint8)
        .tobytes()
    )
    sent = Image.frombytes(mode, size, pixels)
    _, got, seen = round_trip(echo_queue, sent)
    assert isinstance(got, Image.Image)
    assert (got.mode, got.size) == (mode, size)
    assert got.tobytes() == sent.tobytes()
    assert seen == {"kind": "image", "mode": mode, "size": list(size)}


def test_given_values_nested_in_lists_tuples_and_dicts_when_round_tripped_then_every_leaf_survives(
    echo_queue,
):
    array = np.arange(6, dtype=">i2").reshape(2, 3)
    tensor = torch.tensor([1.5, -2.0], dtype=torch.bfloat16)
    image = Image.new("RGB", (3, 2), (10, 20, 30))
    sent = {"batch": [array, (tensor, {"img": image})], "meta": {"n": 2, "tags": ["a", "b"]}}
    _, got, seen = round_trip(echo_queue, sent)
    assert_same_array(got["batch"][0], array)
    got_tensor, inner = got["batch"][1]
    assert got_tensor.dtype == torch.bfloat16 and torch.equal(
        got_tensor.view(torch.int16), tensor.view(torch.int16)
    )
    assert inner["img"].tobytes() == image.tobytes() and inner["img"].mode == "RGB"
    assert got["meta"] == {"n": 2, "tags": ["a", "b"]}
    assert seen["batch"][1][1]["img"] == {"kind": "image", "mode": "RGB", "size": [3, 2]}
