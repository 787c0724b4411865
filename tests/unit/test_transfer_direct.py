"""Downloads through the readinto path (a plain httpx client) against a real local HTTP server:
the bytes, the verification and every S3 answer the SDK handles."""

from __future__ import annotations

import hashlib
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from payloadstore import _transfer
from payloadstore._http import RetryPolicy
from payloadstore._transfer import direct_getter, download
from payloadstore.errors import PayloadCorrupt, PayloadLost, TransferError

BODY = bytes(range(256)) * (40 * 1024 + 3)  # ~10 MiB: several hash slices and read slices
SHA = hashlib.sha256(BODY).hexdigest()
SIZE = len(BODY)


class Server:
    """Answers GET /obj with a scripted list of (status, body, extra headers); counts
    connections so keep-alive reuse is visible."""

    def __init__(self):
        self.script: list[tuple[int, bytes, dict]] = []
        self.connections = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self):
                outer.connections += 1
                super().setup()

            def do_GET(self):
                status, body, headers = outer.script.pop(0) if outer.script else (200, BODY, {})
                self.send_response(status)
                length = headers.pop("Content-Length", str(len(body)))
                self.send_header("Content-Length", length)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/obj?X-Amz-Signature=x"

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    s = Server()
    yield s
    s.close()


@pytest.fixture
def http():
    with httpx.Client(timeout=30) as client:
        yield client


def get(http, server, *, size=SIZE, sha256=SHA, presign_again=None):
    return download(
        http,
        {"url": server.url, "method": "GET"},
        size=size,
        sha256=sha256,
        presign_again=presign_again or (lambda: {"url": server.url, "method": "GET"}),
        retry=RetryPolicy(max_attempts=3, base_s=0.0, max_backoff_s=0.0),
        key="payloads/k",
        progress=False,
        sleep=lambda s: None,
    )


def test_a_plain_client_takes_the_readinto_path_and_a_mocked_one_does_not(http):
    # Given the SDK's own kind of client and one with a mock transport
    mocked = httpx.Client(transport=httpx.MockTransport(lambda r: httpx.Response(200)))
    # Then only the plain one reads straight from the socket
    assert direct_getter(http) is not None
    assert direct_getter(mocked) is None


def test_download_fills_one_buffer_with_the_verified_bytes_over_one_connection(http, server):
    # When the same object is downloaded twice
    first = get(http, server)
    second = get(http, server)
    # Then both are the exact bytes, in a bytearray, over one kept-alive connection
    assert isinstance(first, bytearray) and first == BODY and second == BODY
    assert server.connections == 1


def test_hashing_without_a_helper_thread_gives_the_same_answer(http, server, monkeypatch):
    monkeypatch.setattr(_transfer, "_threaded_hashing", lambda: False)
    assert get(http, server) == BODY


def test_altered_bytes_are_payload_corrupt_naming_both_hashes(http, server):
    # Given S3 holds other bytes of the same size
    altered = b"\xff" + BODY[1:]
    server.script.append((200, altered, {}))
    # When downloaded, Then PayloadCorrupt names the expected and the actual sha256
    with pytest.raises(PayloadCorrupt) as e:
        get(http, server)
    assert e.value.expected_sha256 == SHA
    assert e.value.actual_sha256 == hashlib.sha256(altered).hexdigest()


def test_more_bytes_than_recorded_are_hashed_and_refused(http, server):
    longer = BODY + b"tail"
    server.script.append((200, longer, {}))
    with pytest.raises(PayloadCorrupt) as e:
        get(http, server)
    assert e.value.actual_sha256 == hashlib.sha256(longer).hexdigest()


def test_fewer_bytes_than_recorded_are_refused(http, server):
    server.script.append((200, BODY[:-10], {}))
    with pytest.raises(PayloadCorrupt, match="size mismatch|sha256 mismatch"):
        get(http, server)


def test_a_missing_object_is_payload_lost(http, server):
    server.script.append((404, b"<Error><Code>NoSuchKey</Code></Error>", {}))
    with pytest.raises(PayloadLost):
        get(http, server)


def test_an_expired_url_is_presigned_again_and_the_download_completes(http, server):
    # Given the first URL has expired
    server.script.append(
        (403, b"<Error><Code>AccessDenied</Code><Message>Request has expired</Message></Error>", {})
    )
    asked = []

    def presign_again():
        asked.append(1)
        return {"url": server.url, "method": "GET"}

    # When downloading, Then one new URL is asked for and the bytes arrive
    assert get(http, server, presign_again=presign_again) == BODY
    assert asked == [1]


def test_a_server_error_is_retried(http, server):
    server.script.append((503, b"<Error><Code>SlowDown</Code></Error>", {}))
    assert get(http, server) == BODY


def test_a_lasting_client_error_is_a_transfer_error(http, server):
    server.script.extend([(400, b"<Error><Code>InvalidRequest</Code></Error>", {})] * 3)
    with pytest.raises(TransferError):
        get(http, server)


def test_without_a_recorded_size_the_content_length_decides(http, server):
    assert get(http, server, size=None, sha256=None) == BODY


def test_a_large_buffer_is_not_zero_filled_and_a_short_body_is_cut_to_what_arrived():
    # The large buffer's bytes are undefined until written: a body that stops early must leave
    # none of them in what the caller gets.
    length = _transfer.FRESH_BUFFER_MIN_BYTES + 12345
    buffer = _transfer.fresh_buffer(length)
    assert type(buffer) is bytearray and len(buffer) == length
    arrived = BODY[: length // 2]
    source = memoryview(arrived)
    offset = 0

    def read_into(target):
        nonlocal offset
        n = min(len(target), len(source) - offset)
        target[:n] = source[offset : offset + n]
        offset += n
        return n

    bar = _transfer.Progress(length, "test", enabled=False)
    got = _transfer._with_excess(_transfer._fill(read_into, length, bar, buffer), b"")
    assert got.filled == len(arrived)
    assert bytes(got.buffer) == arrived
    assert got.checksum == hashlib.sha256(arrived).hexdigest()


def test_a_small_buffer_is_a_plain_zeroed_bytearray():
    assert _transfer.fresh_buffer(1000) == bytearray(1000)


@pytest.mark.parametrize(("setting", "advised"), [(None, True), ("0", False)])
def test_huge_page_advice_can_be_turned_off(monkeypatch, setting, advised):
    # Given the real allocator with a recording madvise
    real = _transfer._allocator()
    if real is None:
        pytest.fail("CPython's PyByteArray_FromStringAndSize should be reachable here")
    calls = []
    monkeypatch.setattr(_transfer, "_ALLOC", [(real[0], lambda *a: calls.append(a) or 0)])
    if setting is None:
        monkeypatch.delenv("PAYLOADSTORE_HUGE_PAGES", raising=False)
    else:
        monkeypatch.setenv("PAYLOADSTORE_HUGE_PAGES", setting)
    # When a large download buffer is made
    buffer = _transfer.fresh_buffer(3 * _transfer.FRESH_BUFFER_MIN_BYTES)
    # Then huge pages were asked for by default, and not with PAYLOADSTORE_HUGE_PAGES=0
    assert len(buffer) == 3 * _transfer.FRESH_BUFFER_MIN_BYTES
    assert bool(calls) is advised


# -- CRC64NVME: the transfer checksum, taken slice by slice as the bytes land -------------------


def crc_of(data: bytes) -> str:
    from payloadstore import _checksum

    return _checksum.to_b64(_checksum.of(data))


def get_crc(http, crc: str, url: str, size: int = SIZE):
    return download(
        http,
        {"url": url, "method": "GET"},
        size=size,
        sha256=None,
        crc64nvme=crc,
        presign_again=lambda: {"url": url, "method": "GET"},
        retry=RetryPolicy(max_attempts=3, base_s=0.0, max_backoff_s=0.0),
        key="payloads/k",
        progress=False,
        sleep=lambda s: None,
    )


@pytest.mark.parametrize("plain", [True, False], ids=["readinto", "httpx stream"])
def test_a_crc_reference_is_verified_on_both_paths(http, server, plain):
    # Given the SDK's own client (readinto) or an injected one (httpx's stream)
    class Injected(httpx.HTTPTransport):
        """A transport of the caller's: the SDK uses httpx's stream, not readinto."""

    client = http if plain else httpx.Client(transport=Injected(), timeout=30)
    assert (_transfer.direct_getter(client) is not None) is plain
    # When the object is downloaded against its CRC64NVME: the bytes
    assert get_crc(client, crc_of(BODY), server.url) == BODY
    # And other bytes of the same size: PayloadCorrupt naming both CRCs, no sha256
    altered = bytearray(BODY)
    altered[SIZE // 2] ^= 1
    server.script.append((200, bytes(altered), {}))
    with pytest.raises(PayloadCorrupt) as e:
        get_crc(client, crc_of(BODY), server.url)
    assert e.value.expected_crc64nvme == crc_of(BODY)
    assert e.value.actual_crc64nvme == crc_of(bytes(altered))
    assert e.value.expected_sha256 is None


def test_more_bytes_than_recorded_are_checked_by_crc_and_refused(http, server):
    server.script.append((200, BODY + b"extra", {}))
    with pytest.raises(PayloadCorrupt) as e:
        get_crc(http, crc_of(BODY), server.url)
    assert e.value.actual_crc64nvme == crc_of(BODY + b"extra")
