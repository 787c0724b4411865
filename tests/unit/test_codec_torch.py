"""torch through the codec: exact dtypes (bfloat16 bit-exact), shapes, detaching, memory sharing."""

from __future__ import annotations

import gc

import pytest
import torch

from payloadstore import codec

DTYPES = [
    torch.bfloat16,
    torch.float16,
    torch.float32,
    torch.float64,
    torch.bool,
    torch.int8,
    torch.uint8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.uint16,
    torch.uint32,
    torch.uint64,
    torch.complex64,
    torch.complex128,
    torch.float8_e4m3fn,
    torch.float8_e5m2,
]


def _random_tensor(dtype: torch.dtype, shape: tuple[int, ...], seed: int = 3) -> torch.Tensor:
    """Random bit patterns (NaN payloads, subnormals) so byte equality means bit-exact."""
    generator = torch.Generator().manual_seed(seed)
    count = 1
    for dim in shape:
        count *= dim
    raw = torch.randint(0, 256, (count * dtype.itemsize,), dtype=torch.uint8, generator=generator)
    if dtype == torch.bool:
        raw = raw % 2
    return raw.view(dtype).reshape(shape)


def _bytes_of(tensor: torch.Tensor) -> bytes:
    return bytes(tensor.contiguous().reshape(-1).view(torch.uint8).tolist())


def _round_trip(value, **decode_options):
    return codec.decode(codec.encode(value).tobytes(), **decode_options)


def _assert_bit_exact(decoded: torch.Tensor, original: torch.Tensor) -> None:
    assert type(decoded) is torch.Tensor
    assert decoded.dtype == original.dtype
    assert decoded.shape == original.shape
    assert decoded.device.type == "cpu"
    assert _bytes_of(decoded) == _bytes_of(original)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(5,), (300, 9)], ids=["inline", "out_of_band"])
def test_every_dtype_round_trips_bit_exact(dtype, shape):
    # Given a tensor of random bit patterns, small (inline) or large (data section)
    original = _random_tensor(dtype, shape)

    # When round-tripped
    decoded = _round_trip({"t": original})["t"]

    # Then dtype (bfloat16 stays bfloat16), shape and every byte are unchanged
    _assert_bit_exact(decoded, original)


def test_bfloat16_special_values_survive_exactly():
    # Given bfloat16 NaN with a payload, infinities, -0.0 and a subnormal as raw bit patterns
    bits = torch.tensor([0x7FC1, 0x7F80, -0x80, -0x8000, 0x0001, 0x3F80], dtype=torch.int16)
    original = bits.view(torch.bfloat16)

    # When round-tripped
    decoded = _round_trip(original)

    # Then the raw bits are identical
    assert torch.equal(decoded.view(torch.int16), bits)


@pytest.mark.parametrize("shape", [(), (0,), (3, 0, 2)], ids=["0d", "empty", "empty3d"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.bool], ids=str)
def test_zero_dimensional_and_empty_tensors_keep_shape(shape, dtype):
    # Given a 0-d or empty tensor
    original = _random_tensor(dtype, shape)

    # When round-tripped
    decoded = _round_trip([original])[0]

    # Then its shape and dtype are kept
    _assert_bit_exact(decoded, original)


def test_non_contiguous_tensor_arrives_with_its_values():
    # Given a transposed, strided view with a storage offset
    base = torch.arange(400 * 30, dtype=torch.float32).reshape(400, 30)
    view = base.t()[2:, ::3]
    assert not view.is_contiguous()

    # When round-tripped
    decoded = _round_trip(view)

    # Then the values match
    assert torch.equal(decoded, view)


def test_requires_grad_tensor_is_detached_and_keeps_its_values():
    # Given a leaf that requires grad and a result of autograd ops on it
    leaf = torch.linspace(-1, 1, 2000, requires_grad=True)
    result = leaf * 3

    # When both are round-tripped
    decoded_leaf, decoded_result = _round_trip([leaf, result])

    # Then they arrive as plain tensors with the same values
    assert not decoded_leaf.requires_grad and not decoded_result.requires_grad
    assert torch.equal(decoded_leaf, leaf.detach())
    assert torch.equal(decoded_result, result.detach())


def test_lazily_conjugated_and_negated_views_are_resolved():
    # Given complex views whose conjugation/negation is only a flag
    original = torch.complex(torch.arange(600.0), torch.arange(600.0) + 1)
    conjugated, negated = original.conj(), torch._neg_view(original)
    assert conjugated.is_conj() and negated.is_neg()

    # When round-tripped
    decoded_conj, decoded_neg = _round_trip([conjugated, negated])

    # Then the values are the conjugate and the negation, not the stored memory
    assert torch.equal(decoded_conj, conjugated.resolve_conj())
    assert torch.equal(decoded_neg, -original)


def test_parameter_arrives_as_a_plain_tensor():
    # Given a module parameter
    parameter = torch.nn.Linear(40, 30).weight

    # When round-tripped
    decoded = _round_trip(parameter)

    # Then it is a plain tensor with the parameter's values
    assert type(decoded) is torch.Tensor
    assert torch.equal(decoded, parameter.detach())


def test_tensor_over_immutable_bytes_is_a_copy():
    # Given a payload in an immutable bytes object
    data = codec.encode(torch.zeros(10_000, dtype=torch.float32)).tobytes()

    # When decoded and written to
    decoded = codec.decode(data)
    decoded[0] = 42

    # Then the payload bytes are untouched (torch has no read-only tensors, so it was copied)
    assert codec.decode(data)[0] == 0


def test_tensor_over_a_bytearray_shares_its_memory_unless_copy_is_asked():
    # Given a payload received into a writable bytearray
    buffer = bytearray(codec.encode(torch.zeros(10_000, dtype=torch.int32)).tobytes())

    # When decoded without and with copy
    shared = codec.decode(buffer)
    owned = codec.decode(buffer, copy=True)
    shared[0] = 7

    # Then the shared tensor writes through to the buffer; the copy does not see it
    assert codec.decode(buffer, copy=True)[0] == 7
    assert owned[0] == 0


@pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor:UserWarning")
@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: torch.zeros(3, device="meta"), "device meta"),
        (lambda: torch.quantize_per_tensor(torch.ones(3), 0.1, 0, torch.quint8), "quantized"),
        (lambda: torch.eye(3).to_sparse(), "layout torch.sparse_coo"),
    ],
    ids=["meta", "quantized", "sparse"],
)
def test_tensors_without_plain_cpu_bytes_are_refused_clearly(make, message):
    # Given a tensor with no dense CPU byte layout
    # When encoded, Then CodecError names the reason
    with pytest.raises(codec.CodecError, match=message):
        codec.encode({"t": make()})


def test_tensors_nested_in_tuples_and_dicts_round_trip():
    # Given a tensor inside a tuple inside a dict, next to other values
    big = _random_tensor(torch.bfloat16, (1000, 3))
    value = {"batch": (big, {"ids": torch.arange(5)}), "name": "x"}

    # When round-tripped
    decoded = _round_trip(value)

    # Then each tensor is where it was
    _assert_bit_exact(decoded["batch"][0], big)
    assert torch.equal(decoded["batch"][1]["ids"], torch.arange(5))
    assert decoded["name"] == "x"


def test_encoded_chunks_keep_a_temporary_tensor_alive():
    # Given a payload encoded from a temporary tensor nobody else references
    encoded = codec.encode({"t": torch.arange(1_000_000, dtype=torch.float32) * 2})
    gc.collect()
    scratch = [torch.full((1_000_000,), -1.0) for _ in range(4)]  # reuse any freed memory

    # When the payload is decoded after that
    decoded = codec.decode(encoded.tobytes())["t"]

    # Then it holds the tensor's values (its memory was not freed under the chunk)
    assert torch.equal(decoded, torch.arange(1_000_000, dtype=torch.float32) * 2)
    del scratch
