"""Codec core: plain values, the Encoded chunk API, the envelope layout and refusals."""

from __future__ import annotations

import datetime as dt
import enum
import gc
import hashlib
import struct
import time
from collections import OrderedDict

import msgpack
import numpy as np
import pytest

from payloadstore import codec
from payloadstore.codec import _format


class Color(enum.IntEnum):
    RED = 1


class Shade(str, enum.Enum):
    DARK = "dark"


def test_plain_values_encode_to_exactly_what_msgpack_writes():
    # Given a payload with no arrays, tensors or images
    value = {"args": [1, -2, 2**63 - 1, 1.5, "x", b"\x00\xff", None, True], "kwargs": {"k": {}}}

    # When it is encoded
    encoded = codec.encode(value)

    # Then any msgpack reader can read it: it is the bytes msgpack's own packer writes
    assert encoded.tobytes() == msgpack.packb(value, use_bin_type=True)
    assert codec.decode(encoded.tobytes()) == value


def test_tuples_decode_as_lists_and_subclasses_as_their_base_types():
    # Given tuples, an OrderedDict, an IntEnum and a str-mixin Enum
    value = {
        "pair": (1, (2, 3)),
        "ordered": OrderedDict(a=1),
        "color": Color.RED,
        "shade": Shade.DARK,
    }

    # When round-tripped
    decoded = codec.decode(codec.encode(value).tobytes())

    # Then tuples are lists (as in JSON) and subclasses arrive as plain base values
    assert decoded == {"pair": [1, [2, 3]], "ordered": {"a": 1}, "color": 1, "shade": "dark"}
    assert type(decoded["color"]) is int and type(decoded["shade"]) is str


def test_integer_and_non_string_keys_round_trip():
    # Given a dict keyed by ints and floats
    value = {1: "a", 2.5: "b", None: "c"}

    # When round-tripped
    decoded = codec.decode(codec.encode(value).tobytes())

    # Then the keys are kept
    assert decoded == value


def test_aware_datetime_round_trips_as_the_same_instant_in_utc():
    # Given a timezone-aware datetime with microseconds in a +02:00 zone
    moment = dt.datetime(2026, 3, 4, 5, 6, 7, 891011, tzinfo=dt.timezone(dt.timedelta(hours=2)))

    # When round-tripped
    decoded = codec.decode(codec.encode({"at": moment}).tobytes())["at"]

    # Then the instant is equal and the zone is UTC (msgpack's timestamp carries no offset)
    assert decoded == moment
    assert decoded.tzinfo == dt.UTC


def test_naive_datetime_is_refused_with_a_hint():
    # Given a naive datetime (no instant)
    # When encoded, Then a CodecError says to attach a tzinfo
    with pytest.raises(codec.CodecError, match="naive datetime.*tzinfo"):
        codec.encode([dt.datetime(2026, 1, 1)])


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({1, 2}, "type builtins.set"),
        (object(), "type builtins.object"),
        (1 + 2j, "type builtins.complex"),
        (2**64, "64-bit range"),
        (dt.date(2026, 1, 1), "type datetime.date"),
    ],
)
def test_unsupported_values_are_refused_with_the_type_named(value, message):
    # Given a value msgpack cannot carry
    # When encoded inside a structure, Then CodecError (a ValueError) names the problem
    with pytest.raises(codec.CodecError, match=message) as raised:
        codec.encode({"nested": [value]})
    assert isinstance(raised.value, ValueError)


def test_self_referencing_structure_is_refused():
    # Given a list that contains itself
    loop: list = []
    loop.append(loop)

    # When encoded, Then a CodecError (not a crash) comes back
    with pytest.raises(codec.CodecError):
        codec.encode(loop)


@pytest.mark.timeout(20)
def test_a_structure_sharing_its_parts_past_the_depth_limit_is_refused_at_once():
    # Given values msgpack refuses at once (nested past its depth limit) whose parts are shared:
    # a list holding itself twice, and a chain of pairs of one list, with an unsupported value
    loop: list = []
    loop += [loop, loop]
    chain: list = [object()]
    for _ in range(40):
        chain = [chain, chain]

    # When encoded as a job's args, Then each is refused with a CodecError, not walked path by
    # path (2**512 and 2**40 of them) looking for a bad dict key to name
    for value, message in ((loop, "recursion limit"), (chain, "builtins.object")):
        started = time.perf_counter()
        with pytest.raises(codec.CodecError, match=message):
            codec.encode({"args": [value], "kwargs": {}}, call=True)
        assert time.perf_counter() - started < 5


def test_large_array_is_a_separate_chunk_sharing_the_array_memory():
    # Given an 8 MiB float32 array inside a dict
    array = np.arange(2 * 1024 * 1024, dtype=np.float32)

    # When encoded
    encoded = codec.encode({"weights": array, "step": 3})

    # Then one chunk is a memoryview over the array's own memory (no copy), and the totals agree
    shared = [c for c in encoded.chunks if isinstance(c, memoryview) and len(c) == array.nbytes]
    assert len(shared) == 1
    assert np.shares_memory(np.frombuffer(shared[0], dtype=np.uint8), array)
    assert encoded.nbytes == len(encoded.tobytes()) == len(encoded)
    assert encoded.nbytes < array.nbytes + 512


def test_sha256_and_slices_match_the_joined_bytes():
    # Given an encoded payload of several chunks
    encoded = codec.encode({"a": np.ones(300_000, dtype=np.float64), "b": "text", "c": np.zeros(7)})
    joined = encoded.tobytes()
    assert len(encoded.chunks) > 1

    # When hashed and streamed in 64 KiB slices
    slices = list(encoded.iter_slices(64 * 1024))

    # Then the hash is the joined bytes' hash and the slices concatenate to them
    assert encoded.sha256() == hashlib.sha256(joined).hexdigest()
    assert all(len(s) <= 64 * 1024 for s in slices)
    assert b"".join(slices) == joined == b"".join(encoded) == bytes(encoded)


def test_large_top_level_bytes_are_sent_without_a_copy():
    # Given a 1 MiB bytearray as the whole payload
    blob = bytearray(range(256)) * 4096

    # When encoded
    encoded = codec.encode(blob)

    # Then it is a msgpack bin32 header plus the caller's buffer, and decodes to equal bytes
    assert encoded.chunks[0] == struct.pack(">BI", 0xC6, len(blob))
    assert encoded.chunks[1].obj is blob
    assert codec.decode(encoded.tobytes()) == bytes(blob)


@pytest.mark.parametrize(
    ("make", "shared"),
    [
        (lambda big: {"args": [big], "kwargs": {}}, True),
        (lambda big: {"args": [1, big, "x", big[:1048576]], "kwargs": {"a": big[3:]}}, True),
        (lambda big: [big, {"k": big}], True),
        (lambda big: {"args": [[big]], "kwargs": {}}, False),  # three levels down: copied
        (lambda big: {"args": [bytearray(big)], "kwargs": {}}, False),  # mutable: copied
        (lambda big: {"args": [big, np.arange(70_000, dtype=np.float32)], "kwargs": {}}, False),
        (lambda big: {"args": [big] + [0] * 300, "kwargs": {}}, False),  # long list: not searched
    ],
)
def test_large_bytes_in_a_call_are_sent_without_a_copy_as_exactly_what_msgpack_writes(make, shared):
    # Given a call holding bytes of 1 MiB and more (a job's args and kwargs)
    big = bytes(range(256)) * (5 * 4096 + 1)
    value = make(big)

    # When encoded
    encoded = codec.encode(value)

    # Then the bytes are exactly the plain way's (msgpack's own, or the envelope when arrays
    # are there too), and bytes up to two levels down are the caller's object, not a copy
    plain = codec._core._Encoder()
    structure = codec._core._pack(value, plain.default)
    expected = structure if not plain.blocks else codec._core._envelope(structure, plain).tobytes()
    assert encoded.tobytes() == expected
    assert encoded.sha256() == hashlib.sha256(expected).hexdigest()
    assert shared == any(isinstance(c, memoryview) and c.obj is big for c in encoded.chunks)
    if shared:
        assert codec.decode(encoded.tobytes()) == value


def test_envelope_layout_aligns_data_blocks_to_64_bytes_from_the_payload_start():
    # Given two large arrays of odd sizes
    first = np.arange(1501, dtype=np.uint16)
    second = np.arange(3000, dtype=np.float64)

    # When encoded
    data = codec.encode([first, "between", second]).tobytes()

    # Then the payload is one ext32 envelope whose arrays start on 64-byte boundaries
    marker, body_len, ext_type = struct.unpack_from(">BIb", data)
    assert (marker, ext_type, body_len) == (0xC9, codec.EXT_ENVELOPE, len(data) - 6)
    version, structure_len, data_start = struct.unpack_from(">BII", data, 6)
    assert version == codec.FORMAT_VERSION
    assert (6 + data_start) % 64 == 0 and data_start >= 9 + structure_len
    buffer = bytearray(data)
    decoded = codec.decode(buffer)
    for original, view in zip((first, second), (decoded[0], decoded[2]), strict=True):
        assert (view.ctypes.data - np.frombuffer(buffer, np.uint8).ctypes.data) % 64 == 0
        assert view.tobytes() == original.tobytes()


def test_envelope_over_the_ext32_limit_is_refused(monkeypatch):
    # Given an envelope limit lowered so a 2 KiB array exceeds it (4 GiB is the real one)
    monkeypatch.setattr(_format, "MAX_ENVELOPE_BODY", 1024)

    # When encoded, Then CodecError explains the limit
    with pytest.raises(codec.CodecError, match="limit is 4 GiB"):
        codec.encode(np.zeros(2048, dtype=np.uint8))


def _envelope(structure: bytes, data: bytes = b"", version: int = codec.FORMAT_VERSION) -> bytes:
    data_start = 9 + len(structure)
    body = struct.pack(">BII", version, len(structure), data_start) + structure + data
    return struct.pack(">BIb", 0xC9, len(body), codec.EXT_ENVELOPE) + body


def _ndarray_ext(
    header: dict, inline: bytes | None = b"", version: int = codec.FORMAT_VERSION
) -> bytes:
    if inline is not None:
        header = {**header, "b": inline}
    payload = bytes((version,)) + msgpack.packb(header)
    return msgpack.packb(msgpack.ExtType(codec.EXT_NDARRAY, payload))


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "empty payload"),
        (b"\xc1", "as msgpack"),
        (msgpack.packb([1, 2])[:-1], "as msgpack"),
        (msgpack.packb(1) + b"\x01", "bytes after the end"),
        (msgpack.packb(msgpack.ExtType(42, b"x")), "ext type 42"),
        (msgpack.packb([msgpack.ExtType(codec.EXT_ENVELOPE, b"x")]), "envelope ext value"),
        (_envelope(msgpack.packb(1), version=9), "format version 9.*upgrade payloadstore"),
        (_envelope(msgpack.packb(1))[:-1], "envelope says"),
        (_ndarray_ext({"dtype": "<f4", "shape": [1]}, b"\0" * 4, version=7), "format version 7"),
        (_ndarray_ext({"dtype": "<f4", "shape": [2]}, b"\0" * 4), "needs 8 bytes, found 4"),
        (_ndarray_ext({"dtype": "<f4", "shape": [-1]}), "invalid shape"),
        (_ndarray_ext({"dtype": "nonsense", "shape": [1]}), "unknown dtype"),
        (_ndarray_ext({"dtype": "|O", "shape": [1]}, b"\0" * 8), "Python objects"),
        (_ndarray_ext({"dtype": "<f4", "shape": [1], "off": 0, "len": 4}, None), "data section"),
        (_ndarray_ext({"dtype": "<f4", "shape": [1]}, None), "data section"),
        (_ndarray_ext({"dtype": "<f4", "shape": [1]}, "text"), "not bytes"),
        (
            _envelope(
                msgpack.packb(
                    msgpack.ExtType(
                        codec.EXT_NDARRAY,
                        b"\x01"
                        + msgpack.packb({"dtype": "<f4", "shape": [4], "off": 0, "len": 16}),
                    )
                ),
                b"\0" * 8,
            ),
            "out of range",
        ),
        (msgpack.packb({(1, 2): 3}), "map keys"),
    ],
)
def test_bad_payloads_are_refused_with_a_reason(data, message):
    # Given bytes that are not a payload this reader can trust
    # When decoded, Then CodecError says why
    with pytest.raises(codec.CodecError, match=message):
        codec.decode(data)


def test_decode_refuses_non_bytes_input():
    # Given a str instead of bytes
    # When decoded, Then CodecError names the expectation
    with pytest.raises(codec.CodecError, match="bytes-like"):
        codec.decode("not bytes")  # type: ignore[arg-type]


def test_content_type_and_version_are_published():
    # Given the codec's public constants
    # Then they say what the store records with each object
    assert codec.CONTENT_TYPE == "application/msgpack"
    assert codec.FORMAT_VERSION == 1
    assert issubclass(codec.CodecError, ValueError)


@pytest.mark.parametrize("enabled_before", [True, False])
def test_decoding_a_large_structure_leaves_the_gc_as_it_found_it(enabled_before):
    # Given a structure over 1 MiB of msgpack (decode pauses the GC for it) and a GC state
    data = codec.encode([{"k": i, "v": "x" * 8} for i in range(100_000)]).tobytes()
    assert len(data) > 1024 * 1024
    was_enabled = gc.isenabled()
    (gc.enable if enabled_before else gc.disable)()
    try:
        # When decoded, successfully and unsuccessfully
        assert len(codec.decode(data)) == 100_000
        with pytest.raises(codec.CodecError):
            codec.decode(data[:-1])

        # Then the GC is enabled exactly when it was before
        assert gc.isenabled() is enabled_before
    finally:
        (gc.enable if was_enabled else gc.disable)()


def test_bytearray_and_memoryview_come_back_as_bytes_as_docs_codec_says():
    from payloadstore import codec as c

    for value in (bytearray(b"ab"), memoryview(b"ab"), bytearray(5000)):
        back = c.decode(c.encode(value).tobytes())
        assert type(back) is bytes and back == bytes(value)


@pytest.mark.parametrize(
    ("value", "place"),
    [
        ({(1, 2): "x"}, "value"),
        ([0, {"a": {(1,): 1}}], "value[1]['a']"),
        ({"k": [np.zeros(3), {frozenset({1}): 2}]}, "value['k'][1]"),
        # beside a large array (the envelope layout) and large bytes (lifted)
        ({"big": np.zeros(1 << 17), "m": {("a", "b"): 1}}, "value['m']"),
        ({"b": b"\0" * (2 << 20), "m": {(1, 2): 1}}, "value['m']"),
    ],
)
def test_a_container_as_a_dict_key_is_refused_naming_its_place(value, place):
    # Given a value with a tuple or frozenset as a dict key, which no reader could decode
    # When it is encoded
    with pytest.raises(codec.CodecError) as refused:
        codec.encode(value)
    # Then the error names the key and where it is
    assert f" in {place}: " in str(refused.value)
    assert "use a str, int, float, bool, None or bytes key" in str(refused.value)


def test_tuples_as_values_and_scalar_keys_still_encode():
    # Given tuples only as values, and keys of every scalar kind
    value = {"t": (1, (2, 3)), 7: [(4,)], 1.5: None, None: 0, b"k": (), True: "x"}
    # When it is encoded and decoded
    decoded = codec.decode(codec.encode(value).tobytes())
    # Then the tuples are lists and the keys are as they were
    assert decoded == {"t": [1, [2, 3]], 7: [[4]], 1.5: None, None: 0, b"k": [], True: "x"}
