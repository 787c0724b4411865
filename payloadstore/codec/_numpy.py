"""numpy arrays and scalars <-> EXT_NDARRAY. Imported only when a numpy value or ext is met."""

from __future__ import annotations

from typing import Any

import numpy as np

from ._format import CodecError, check_shape, element_count


def _refuse_dtype(dtype: np.dtype, what: str) -> None:
    if dtype.hasobject:
        raise CodecError(
            f"cannot {what} a numpy array of dtype {dtype}: it holds Python objects, not bytes; "
            "convert it to a numeric/string dtype or to a list first"
        )
    if dtype.fields is not None or dtype.subdtype is not None:
        raise CodecError(
            f"cannot {what} a numpy array of structured dtype {dtype}: send each field as its "
            "own array"
        )


def to_header_and_bytes(value: Any) -> tuple[dict[str, Any], memoryview]:
    """Returns the header and the C-order bytes as a byte memoryview (which keeps them alive)."""
    is_scalar = isinstance(value, np.generic)
    if isinstance(value, np.ma.MaskedArray):
        raise CodecError("cannot encode a numpy masked array: send .data and .mask separately")
    arr = np.asarray(value)
    _refuse_dtype(arr.dtype, "encode")
    if not arr.flags.c_contiguous:
        # A strided view would otherwise need per-element packing; one C-order copy is cheaper.
        arr = arr.copy(order="C")
    header: dict[str, Any] = {"dtype": arr.dtype.str, "shape": list(arr.shape)}
    if is_scalar:
        header["scalar"] = True
    # Through uint8 so dtypes the buffer protocol cannot describe (datetime64, float16) export too.
    raw = memoryview(arr.reshape(-1).view(np.uint8)) if arr.nbytes else memoryview(b"")
    return header, raw


def from_header(header: dict[str, Any], raw: memoryview, *, view: bool, copy: bool) -> Any:
    """Builds the array; `view` says `raw` is the caller's buffer (zero-copy allowed)."""
    dtype_str = header.get("dtype")
    if not isinstance(dtype_str, str):
        raise CodecError(f"numpy ext value has an invalid dtype {dtype_str!r}")
    try:
        dtype = np.dtype(dtype_str)
    except (TypeError, ValueError) as e:
        raise CodecError(f"numpy ext value has an unknown dtype {dtype_str!r}") from e
    _refuse_dtype(dtype, "decode")
    shape = check_shape("numpy", header.get("shape"))
    count = element_count(shape)
    if count * dtype.itemsize != len(raw):
        raise CodecError(
            f"numpy ext value is corrupt: shape {list(shape)} of {dtype_str} needs "
            f"{count * dtype.itemsize} bytes, found {len(raw)}"
        )
    if count == 0:
        arr: Any = np.empty(shape, dtype=dtype)
    else:
        arr = np.frombuffer(raw, dtype=dtype, count=count).reshape(shape)
    if header.get("scalar"):
        return arr[()]
    if copy or not view:
        # Inline bytes sit unaligned inside the structure: give them memory of their own.
        arr = arr.copy()
    if not copy:
        arr.flags.writeable = False
    return arr


def from_zdata(zdata: dict[str, Any], *, copy: bool) -> Any:
    """zaku's `{"ztype": "numpy.ndarray", "b", "dtype", "shape"}` (dtype as `str(arr.dtype)`)."""
    raw = zdata.get("b")
    if not isinstance(raw, bytes):
        raise CodecError("zaku numpy.ndarray map has no bytes under 'b'")
    shape = zdata.get("shape")
    if isinstance(shape, tuple):
        shape = list(shape)
    header = {"dtype": zdata.get("dtype"), "shape": shape}
    return from_header(header, memoryview(raw), view=False, copy=copy)
