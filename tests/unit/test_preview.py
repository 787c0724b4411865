"""The operator's preview of a payload (payloadstore._preview): readable, bounded, and safe on
any bytes (nothing executed, no array built, numpy never needed to read a header)."""

from __future__ import annotations

import datetime
import subprocess
import sys

import msgpack
import numpy as np

from payloadstore import codec
from payloadstore._preview import HEAD_BYTES, MAX_CHARS, needed_prefix, preview


def test_given_job_arguments_when_previewed_then_they_read_as_python_text():
    data = codec.encode({"args": [21, "hello"], "kwargs": {"flag": True, "x": None}}).tobytes()
    shown = preview(data)
    assert shown.text == "{'args': [21, 'hello'], 'kwargs': {'flag': True, 'x': None}}"
    assert not shown.truncated and shown.error is None


def test_given_arrays_when_previewed_then_shapes_and_dtypes_not_values():
    small = np.arange(12, dtype=np.float32).reshape(3, 4)
    large = np.zeros((500, 600), dtype=np.int16)
    shown = preview(codec.encode({"a": small, "b": large}).tobytes())
    assert "<ndarray shape=(3, 4) dtype=<f4, 48 bytes>" in shown.text
    assert "<ndarray shape=(500, 600) dtype=<i2, 600000 bytes>" in shown.text


def test_given_a_large_payload_when_its_first_bytes_are_read_then_the_structure_is_enough():
    data = codec.encode({"args": [np.ones((1000, 1000))], "kwargs": {}}).tobytes()
    needed = needed_prefix(data[:HEAD_BYTES])
    assert needed is not None and needed < 200 < len(data)
    assert preview(data[:needed]).text == (
        "{'args': [<ndarray shape=(1000, 1000) dtype=<f8, 8000000 bytes>], 'kwargs': {}}"
    )
    assert needed_prefix(msgpack.packb([1, 2, 3])) is None


def test_long_values_are_truncated_and_said_so():
    shown = preview(msgpack.packb({"s": "x" * 1000, "l": list(range(500)), "b": b"\0" * 99}))
    assert shown.truncated
    assert "…(1000 chars)" in shown.text and "…(480 more)" in shown.text
    assert "…(99 bytes)" in shown.text
    huge = preview(msgpack.packb([["y" * 150] * 20] * 20))
    assert huge.truncated and len(huge.text) <= MAX_CHARS


def test_a_datetime_and_a_timestamp_read_as_iso_text():
    when = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
    assert preview(codec.encode(when).tobytes()).text == "2026-01-02T03:04:05+00:00"


def test_bytes_that_are_not_a_payload_get_a_reason_not_an_exception():
    for data in (
        b"\xc1garbage",
        b"\x91" * 100_000,
        b"",
        msgpack.packb({(1,): 2}, strict_types=False),
    ):
        shown = preview(data)
        assert (
            shown.text == "" and shown.error and "not a payloadstore msgpack value" in shown.error
        )


def test_unknown_ext_types_are_described_never_decoded():
    data = msgpack.packb([msgpack.ExtType(99, b"\x80\x04cos\nsystem\n"), 1])
    assert preview(data).text == "[<ext type 99, 13 bytes>, 1]"


def test_a_preview_of_arrays_does_not_import_numpy():
    data = codec.encode({"a": np.zeros((2, 2))}).tobytes()
    code = (
        "import sys; from payloadstore._preview import preview;"
        f"print(preview({data!r}).text); print('numpy' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.splitlines() == ["{'a': <ndarray shape=(2, 2) dtype=<f8, 32 bytes>}", "False"]


def test_an_s3_value_is_previewed_from_its_first_bytes_and_a_deleted_one_says_why():
    import httpx

    from payloadstore._preview import describe
    from payloadstore._wire import StoredPayload

    big = codec.encode({"args": [np.zeros((1000, 1000))], "kwargs": {}}).tobytes()
    asked: list[str | None] = []

    def s3(request: httpx.Request) -> httpx.Response:
        asked.append(request.headers.get("Range"))
        if request.url.path == "/gone":
            return httpx.Response(404)
        first, last = request.headers["Range"].removeprefix("bytes=").split("-")
        return httpx.Response(206, content=big[int(first) : int(last) + 1])

    http = httpx.Client(transport=httpx.MockTransport(s3))
    ref = {"kind": "s3", "bucket": "b", "key": "k", "size": len(big)}
    stored = StoredPayload(tier="s3", size=len(big), ref=ref, download_url="https://s3.example/k")
    facts = describe(stored, http)
    # Two ranged GETs: the first 15 bytes, then the structure; never the 8 MB of data
    assert asked == ["bytes=0-14", f"bytes=0-{needed_prefix(big[:HEAD_BYTES]) - 1}"]
    assert facts["preview"] == (
        "{'args': [<ndarray shape=(1000, 1000) dtype=<f8, 8000000 bytes>], 'kwargs': {}}"
    )
    assert facts["key"] == "k" and "download_url" not in facts
    gone = StoredPayload(tier="s3", size=10, ref=ref, download_url="https://s3.example/gone")
    assert "the object is gone" in describe(gone, http)["preview_error"]
