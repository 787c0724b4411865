"""torch tensors <-> EXT_TORCH. Imported only when a tensor or a torch ext value is met.

Tensor bytes are read through ctypes rather than `.numpy()`, so bfloat16 and the float8 types
(which numpy cannot represent) and torch builds without numpy all work; the byte view holds a
reference to the CPU tensor, so the memory it points at lives as long as the view.
"""

from __future__ import annotations

import ctypes
from typing import Any

import torch

from ._format import CodecError, check_shape, element_count

# Plain strided element types, stored by their torch name ("bfloat16", "complex64", ...).
# Quantized and sub-byte types have no plain byte layout and are refused.
_DTYPE_NAMES = (
    "bool",
    "uint8",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "bfloat16",
    "float32",
    "float64",
    "complex32",
    "complex64",
    "complex128",
    "float8_e4m3fn",
    "float8_e4m3fnuz",
    "float8_e5m2",
    "float8_e5m2fnuz",
    "float8_e8m0fnu",
)
DTYPES_BY_NAME: dict[str, torch.dtype] = {
    name: getattr(torch, name)
    for name in _DTYPE_NAMES
    if isinstance(getattr(torch, name, None), torch.dtype)
}
NAMES_BY_DTYPE = {dtype: name for name, dtype in DTYPES_BY_NAME.items()}


def to_header_and_bytes(value: Any) -> tuple[dict[str, Any], memoryview]:
    """Returns the header and the tensor's bytes as a memoryview that keeps the tensor alive."""
    tensor = value.detach()  # gradients are not data: a requires_grad tensor travels as its values
    if tensor.is_quantized or tensor.is_nested or tensor.layout != torch.strided:
        raise CodecError(
            f"cannot encode a torch tensor with layout {tensor.layout}"
            f"{' (quantized)' if tensor.is_quantized else ''}: convert it to a dense tensor first"
        )
    name = NAMES_BY_DTYPE.get(tensor.dtype)
    if name is None:
        raise CodecError(
            f"cannot encode a torch tensor of dtype {tensor.dtype}: supported dtypes are "
            f"{', '.join(sorted(DTYPES_BY_NAME))}"
        )
    if tensor.device.type != "cpu":
        try:
            tensor = tensor.to("cpu")
        except (RuntimeError, NotImplementedError) as e:
            raise CodecError(
                f"cannot copy a torch tensor on device {tensor.device} to the CPU: {e}"
            ) from e
    # Lazily conjugated/negated views keep their flag, not the values, in memory.
    tensor = tensor.resolve_conj().resolve_neg().contiguous()
    header = {"dtype": name, "shape": list(tensor.shape)}
    nbytes = tensor.numel() * tensor.element_size()
    if nbytes == 0:
        return header, memoryview(b"")
    window = (ctypes.c_ubyte * nbytes).from_address(tensor.data_ptr())
    window.owner = tensor  # the view below keeps `window` alive, and so the memory it points at
    return header, memoryview(window).cast("B")


def from_header(header: dict[str, Any], raw: memoryview, *, view: bool, copy: bool) -> Any:
    """Builds the tensor; shares `raw` only when it is the caller's buffer and writable.

    torch has no read-only tensors, so a tensor over an immutable `bytes` payload would let a write
    corrupt that object: such tensors are copied. Download into a bytearray to get zero-copy tensors.
    """
    name = header.get("dtype")
    dtype = DTYPES_BY_NAME.get(name) if isinstance(name, str) else None
    if dtype is None:
        raise CodecError(
            f"torch ext value has dtype {name!r}, which this torch ({torch.__version__}) "
            "cannot hold"
        )
    shape = check_shape("torch", header.get("shape"))
    count = element_count(shape)
    if count * dtype.itemsize != len(raw):
        raise CodecError(
            f"torch ext value is corrupt: shape {list(shape)} of {name} needs "
            f"{count * dtype.itemsize} bytes, found {len(raw)}"
        )
    if count == 0:
        return torch.empty(shape, dtype=dtype)
    source = raw if (view and not copy and not raw.readonly) else bytearray(raw)
    return torch.frombuffer(source, dtype=dtype, count=count).reshape(shape)


def from_zdata(zdata: dict[str, Any], *, copy: bool) -> Any:
    """zaku's `{"ztype": "torch.Tensor", "b", "dtype", "shape"}`, dtype given as a numpy name.

    zaku itself rebuilds these with `torch.Tensor(array)`, which turns every dtype into float32;
    here the dtype is kept.
    """
    try:
        from . import _numpy
    except ImportError as e:
        raise CodecError(
            f"payload holds a zaku torch.Tensor; install numpy to decode it: {e}"
        ) from e
    array = _numpy.from_zdata(zdata, copy=True)
    try:
        return torch.from_numpy(array)
    except TypeError as e:
        raise CodecError(f"zaku torch.Tensor of dtype {array.dtype} has no torch dtype") from e
