"""The SDK's multipart transfers (payloadstore/_multipart*.py) against a fake S3 (httpx's
MockTransport): parts retried alone, expired URLs re-presigned in one call, ranges verified by
the composite sha256, bounded writes into a file."""

from __future__ import annotations

import hashlib
import re
import threading

import httpx
import pytest

from payloadstore._http import RetryPolicy
from payloadstore._multipart import composite_hex
from payloadstore._multipart_download import download_parts
from payloadstore._multipart_upload import upload_parts
from payloadstore.errors import PayloadCorrupt, TransferError

PART = 1000
RETRY = RetryPolicy(max_attempts=4, base_s=0.0, max_backoff_s=0.0)


def body(size: int) -> bytes:
    return bytes((i * 7 + i // 256) % 251 for i in range(size))


def composite_of(data: bytes) -> str:
    return composite_hex(
        hashlib.sha256(data[i : i + PART]).digest() for i in range(0, len(data), PART)
    )


class FakeS3:
    """Part PUTs to /part/<n>?gen=<g>, ranged GETs of one object; scripted failures."""

    def __init__(self, obj: bytes = b""):
        self.obj = obj
        self.parts: dict[int, bytes] = {}
        self.puts: list[int] = []
        self.fail_once: dict[int, int] = {}  # part number -> status of its first PUT
        self.expired_gen = -1  # URLs of this generation answer 403 expired
        self.range_fail_once: set[int] = set()
        self.lock = threading.Lock()

    def handler(self, request: httpx.Request) -> httpx.Response:
        with self.lock:
            if request.method == "PUT":
                number = int(re.search(r"/part/(\d+)", request.url.path).group(1))
                gen = int(request.url.params["gen"])
                self.puts.append(number)
                if gen == self.expired_gen:
                    return httpx.Response(
                        403,
                        text="<Error><Code>AccessDenied</Code><Message>Request has expired"
                        "</Message></Error>",
                    )
                if self.fail_once.pop(number, None):
                    return httpx.Response(503, text="<Error><Code>SlowDown</Code></Error>")
                self.parts[number] = request.read()
                return httpx.Response(200)
            start, end = map(int, re.match(r"bytes=(\d+)-(\d+)", request.headers["range"]).groups())
            if start in self.range_fail_once:
                self.range_fail_once.discard(start)
                return httpx.Response(503, text="<Error><Code>SlowDown</Code></Error>")
            return httpx.Response(206, content=self.obj[start : end + 1])


class PartsAsked:
    """What the control plane's parts route answers: a URL per part, of a URL generation."""

    def __init__(self):
        self.calls: list[list[int]] = []
        self.generation = 0

    def __call__(self, parts: list[dict]) -> dict:
        self.calls.append([p["number"] for p in parts])
        gen = self.generation
        self.generation += 1
        return {
            "parts": [
                {
                    "number": p["number"],
                    "url": f"http://s3.test/part/{p['number']}?gen={gen}",
                    "headers": {"Content-Length": str(p["size"])},
                }
                for p in parts
            ],
            "expires_at": "2999-01-01T00:00:00Z",
        }


def test_parts_upload_in_url_batches_and_the_composite_is_returned():
    # Given a 10-part payload and a fake S3
    data = body(10 * PART - 3)
    s3 = FakeS3()
    asked = PartsAsked()
    with httpx.Client(transport=httpx.MockTransport(s3.handler)) as client:
        # When it is uploaded in parts
        composite = upload_parts(
            client,
            {"part_bytes": PART, "part_count": 10},
            [memoryview(data[:2500]), memoryview(data[2500:])],
            len(data),
            ask_parts=asked,
            retry=RETRY,
            progress=False,
        )
    # Then URLs were asked for in batches of 4, then 6 (the rest), and every part is S3's
    assert asked.calls == [[1, 2, 3, 4], [5, 6, 7, 8, 9, 10]]
    assert b"".join(s3.parts[n] for n in range(1, 11)) == data
    assert composite == composite_of(data)


def test_a_failed_part_is_retried_alone():
    data = body(6 * PART)
    s3 = FakeS3()
    s3.fail_once = {3: 503}
    asked = PartsAsked()
    with httpx.Client(transport=httpx.MockTransport(s3.handler)) as client:
        upload_parts(
            client,
            {"part_bytes": PART, "part_count": 6},
            [data],
            len(data),
            ask_parts=asked,
            retry=RETRY,
            progress=False,
        )
    assert sorted(s3.puts) == [1, 2, 3, 3, 4, 5, 6]
    assert b"".join(s3.parts[n] for n in range(1, 7)) == data
    assert len(asked.calls) == 2  # no re-presign for a 503


def test_expired_part_urls_are_re_presigned_in_one_call_for_the_parts_left():
    # Given the first batch's URLs (generation 0) have expired
    data = body(4 * PART)
    s3 = FakeS3()
    s3.expired_gen = 0
    asked = PartsAsked()
    with httpx.Client(transport=httpx.MockTransport(s3.handler)) as client:
        upload_parts(
            client,
            {"part_bytes": PART, "part_count": 4},
            [data],
            len(data),
            ask_parts=asked,
            retry=RETRY,
            progress=False,
        )
    # Then one more parts call re-presigned them (not one per part), and all uploaded
    assert len(asked.calls) == 2 and sorted(asked.calls[1]) == [1, 2, 3, 4]
    assert b"".join(s3.parts[n] for n in range(1, 5)) == data


def test_a_part_s3_refuses_for_good_raises():
    data = body(2 * PART)

    def refuse(request):
        return httpx.Response(400, text="<Error><Code>BadDigest</Code></Error>")

    with (
        httpx.Client(transport=httpx.MockTransport(refuse)) as client,
        pytest.raises(TransferError, match="BadDigest"),
    ):
        upload_parts(
            client,
            {"part_bytes": PART, "part_count": 2},
            [data],
            len(data),
            ask_parts=PartsAsked(),
            retry=RETRY,
            progress=False,
        )


def test_ranges_are_read_verified_and_a_failed_range_is_fetched_again_alone(tmp_path):
    data = body(7 * PART + 11)
    s3 = FakeS3(data)
    s3.range_fail_once = {2 * PART}
    multipart = {"part_bytes": PART, "part_count": 8, "composite_sha256": composite_of(data)}
    with httpx.Client(transport=httpx.MockTransport(s3.handler)) as client:
        got = download_parts(
            client,
            {"url": "http://s3.test/object"},
            size=len(data),
            multipart=multipart,
            presign_again=lambda: {"url": "http://s3.test/object"},
            retry=RETRY,
            progress=False,
        )
        assert bytes(got) == data
        # And into a file (part-sized buffers per worker) and into a caller's buffer
        out = tmp_path / "out.bin"
        assert (
            download_parts(
                client,
                {"url": "http://s3.test/object"},
                size=len(data),
                multipart=multipart,
                presign_again=dict,
                retry=RETRY,
                progress=False,
                into=out,
            )
            is None
        )
        assert out.read_bytes() == data
        buffer = bytearray(len(data))
        download_parts(
            client,
            {"url": "http://s3.test/object"},
            size=len(data),
            multipart=multipart,
            presign_again=dict,
            retry=RETRY,
            progress=False,
            into=buffer,
        )
        assert bytes(buffer) == data


def test_a_range_with_other_bytes_fails_the_composite_check():
    data = body(3 * PART)
    damaged = data[:PART] + bytes([data[PART] ^ 1]) + data[PART + 1 :]
    s3 = FakeS3(damaged)
    multipart = {"part_bytes": PART, "part_count": 3, "composite_sha256": composite_of(data)}
    with (
        httpx.Client(transport=httpx.MockTransport(s3.handler)) as client,
        pytest.raises(PayloadCorrupt) as e,
    ):
        download_parts(
            client,
            {"url": "http://s3.test/object"},
            size=len(data),
            multipart=multipart,
            presign_again=dict,
            retry=RETRY,
            key="k",
            progress=False,
        )
    assert e.value.expected_sha256 == composite_of(data)
    assert e.value.actual_sha256 == composite_of(damaged)


def test_a_file_is_read_by_part_with_few_parts_held_at_once(tmp_path, monkeypatch):
    # Given a 40-part file, 2 part workers, and a reader that counts the parts read and not yet
    # uploaded
    monkeypatch.setenv("PAYLOADSTORE_PART_WORKERS", "2")
    from payloadstore._multipart_upload import FileParts

    data = body(40 * PART - 11)
    path = tmp_path / "blob.bin"
    path.write_bytes(data)
    s3 = FakeS3()
    reads: list[int] = []
    parts = FileParts(path)
    pending = {"now": 0, "most": 0}
    lock = threading.Lock()

    hashed: list[int] = []

    def read(start: int, length: int) -> bytes:
        with lock:
            reads.append(start)
            if not threading.current_thread().name.startswith("payload-part"):
                hashed.append(start)  # the hashing pass (the caller's thread)
                pending["most"] = max(pending["most"], len(hashed) - len(s3.parts))
        return parts.read(start, length)

    handler = s3.handler

    try:
        with httpx.Client(transport=httpx.MockTransport(handler)) as client:
            # When it is uploaded in parts read from the file
            composite = upload_parts(
                client,
                {"part_bytes": PART, "part_count": 40},
                (),
                len(data),
                ask_parts=PartsAsked(),
                retry=RETRY,
                progress=False,
                read_part=read,
            )
    finally:
        parts.close()
    # Then S3 has the file's bytes, each part read twice (hashed, then uploaded)
    assert b"".join(s3.parts[n] for n in range(1, 41)) == data
    assert composite == composite_of(data)
    assert sorted(reads) == sorted(list(range(0, len(data), PART)) * 2)
    # And the hashing waited for the uploads (at most 2 parts in flight per worker beyond the
    # batch of URLs being asked for: 4, 8, 16, ... parts), not reading the whole file ahead
    assert pending["most"] <= 2 * 2 + 16 + 4


# -- CRC64NVME (FULL_OBJECT): first part URLs with the presign, the whole object's CRC -----------


def crc_of(data: bytes) -> str:
    from payloadstore import _checksum

    return _checksum.to_b64(_checksum.of(data))


def test_crc_upload_uses_the_presigns_part_urls_and_returns_the_whole_crc():
    # Given a 10-part CRC64NVME upload whose presign answer carried the first 6 part URLs
    data = body(10 * PART - 3)
    s3 = FakeS3()
    asked = PartsAsked()
    first = asked([{"number": n, "size": PART} for n in range(1, 7)])
    asked.calls.clear()
    multipart = {"part_bytes": PART, "part_count": 10, **first}
    with httpx.Client(transport=httpx.MockTransport(s3.handler)) as client:
        # When it is uploaded
        crc = upload_parts(
            client,
            {**multipart, "parts": first["parts"], "parts_expire_at": first["expires_at"]},
            [memoryview(data)],
            len(data),
            ask_parts=asked,
            retry=RETRY,
            progress=False,
            algorithm="CRC64NVME",
        )
    # Then only parts 7..10 were asked for (with their CRCs), every part is S3's, and the
    # answer is the CRC of the whole payload (the parts' CRCs combined)
    assert asked.calls == [[7, 8, 9, 10]]
    assert b"".join(s3.parts[n] for n in range(1, 11)) == data
    assert crc == crc_of(data)


def test_crc_download_combines_the_ranges_and_catches_a_changed_byte(tmp_path):
    data = body(3 * PART + 17)
    multipart = {"part_bytes": PART, "part_count": 4}

    def read(obj: bytes, into=None):
        s3 = FakeS3(obj)
        with httpx.Client(transport=httpx.MockTransport(s3.handler)) as client:
            return download_parts(
                client,
                {"url": "http://s3.test/object"},
                size=len(data),
                multipart=multipart,
                presign_again=dict,
                retry=RETRY,
                key="k",
                progress=False,
                crc64nvme=crc_of(data),
                into=into,
            )

    # Given the object as stored: read whole, into memory and into a file
    assert bytes(read(data)) == data
    out = tmp_path / "out.bin"
    read(data, into=out)
    assert out.read_bytes() == data
    # Given one byte changed in the third range: PayloadCorrupt naming both CRCs
    damaged = data[: 2 * PART + 5] + bytes([data[2 * PART + 5] ^ 1]) + data[2 * PART + 6 :]
    with pytest.raises(PayloadCorrupt) as e:
        read(damaged)
    assert e.value.expected_crc64nvme == crc_of(data)
    assert e.value.actual_crc64nvme == crc_of(damaged)
