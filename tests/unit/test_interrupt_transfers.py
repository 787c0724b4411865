"""Interruption is prompt (issue 46): Ctrl-C (SIGINT) during a multipart download stops it
within about a second, starts no range after it, and leaves no temporary file (a download into
a path leaves the old file whole). Against a real HTTP server on loopback that serves each
range slowly, as a far S3 would."""

from __future__ import annotations

import http.server
import os
import re
import signal
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from payloadstore._http import RetryPolicy
from payloadstore._multipart_download import download_parts

PART = 1 << 20
PARTS = 64
CHUNK = 64 * 1024
# Each range trickles out in about 0.25 s: 8 workers take ~2 s for the 64 parts.
CHUNK_PAUSE_S = 0.25 / (PART // CHUNK)


@pytest.fixture(autouse=True)
def ctrl_c_raises() -> Iterator[None]:
    """SIGINT raises KeyboardInterrupt, as in a terminal: a process started in the background
    by a non-interactive shell (`make test &`, nohup) inherits SIGINT ignored, and Python then
    installs no handler of its own."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.fixture
def slow_object() -> Iterator[tuple[str, bytes, list[float]]]:
    """(url, the object's bytes, the time.monotonic() each range request arrived)."""
    data = os.urandom(PART) * PARTS
    started: list[float] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            started.append(time.monotonic())
            first, last = map(int, re.match(r"bytes=(\d+)-(\d+)", self.headers["Range"]).groups())
            body = data[first : last + 1]
            self.send_response(206)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Content-Range", f"bytes {first}-{last}/{len(data)}")
            self.end_headers()
            try:
                for at in range(0, len(body), CHUNK):
                    self.wfile.write(body[at : at + CHUNK])
                    self.wfile.flush()
                    time.sleep(CHUNK_PAUSE_S)
            except OSError:
                pass  # the reader went away

        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/obj", data, started
    finally:
        server.shutdown()
        server.server_close()


def test_ctrl_c_stops_a_multipart_download_within_a_second_and_leaves_no_file(
    slow_object, tmp_path, monkeypatch
):
    monkeypatch.setenv("PAYLOADSTORE_PART_WORKERS", "8")
    url, data, started = slow_object
    # Given a download of 64 parts into a path that holds an older file
    target = tmp_path / "result.bin"
    target.write_bytes(b"the previous result")
    interrupted_at: list[float] = []

    def ctrl_c() -> None:
        interrupted_at.append(time.monotonic())
        os.kill(os.getpid(), signal.SIGINT)

    timer = threading.Timer(0.6, ctrl_c)
    # When Ctrl-C arrives 0.6 s in (a few rounds of ranges done, most to come)
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            download_parts(
                httpx.Client(),
                {"url": url, "method": "GET", "expires_at": None},
                size=len(data),
                multipart={"part_bytes": PART, "part_count": PARTS},
                presign_again=lambda: {"url": url},
                retry=RetryPolicy(max_attempts=2, base_s=0.01),
                into=target,
            )
        stopped_at = time.monotonic()
    finally:
        timer.cancel()
    # Then it stopped within about a second (the ranges in flight end at their next slice),
    # no range started after the interrupt, the old file is whole and no partial file is left
    took = stopped_at - interrupted_at[0]
    after = sum(t > interrupted_at[0] + 0.2 for t in started)
    print(f"ctrl-c to stop: {took:.3f} s; ranges started {len(started)}/{PARTS}, after: {after}")
    assert took < 1.0
    assert after == 0
    assert 0 < len(started) < PARTS
    assert len(started) < PARTS
    assert target.read_bytes() == b"the previous result"
    assert [p.name for p in tmp_path.iterdir()] == ["result.bin"]


def test_a_download_into_a_path_replaces_it_only_when_whole(slow_object, tmp_path, monkeypatch):
    monkeypatch.setenv("PAYLOADSTORE_PART_WORKERS", "16")
    url, data, _ = slow_object
    target = tmp_path / "result.bin"
    target.write_bytes(b"old")
    download_parts(
        httpx.Client(),
        {"url": url, "method": "GET", "expires_at": None},
        size=len(data),
        multipart={"part_bytes": PART, "part_count": PARTS},
        presign_again=lambda: {"url": url},
        retry=RetryPolicy(max_attempts=2, base_s=0.01),
        into=target,
    )
    assert target.read_bytes() == data
    assert [p.name for p in tmp_path.iterdir()] == ["result.bin"]


@pytest.fixture
def slow_sink() -> Iterator[tuple[str, list[float]]]:
    """(url, the time.monotonic() each part PUT arrived): reads every body slowly."""
    started: list[float] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_PUT(self) -> None:
            started.append(time.monotonic())
            left = int(self.headers["Content-Length"])
            try:
                while left:
                    got = self.rfile.read(min(CHUNK, left))
                    if not got:
                        return
                    left -= len(got)
                    time.sleep(CHUNK_PAUSE_S)
            except OSError:
                return
            self.send_response(200)
            self.send_header("ETag", '"etag"')
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", started
    finally:
        server.shutdown()
        server.server_close()


def test_ctrl_c_stops_a_multipart_upload_within_a_second(slow_sink, monkeypatch):
    from payloadstore._multipart_upload import upload_parts

    # Given a 64-part upload to a slow S3 (a guard: uploads already cancelled the parts not
    # started; the parts in flight finish, each within a round)
    part_mib, parts_count = 1, PARTS
    monkeypatch.setenv("PAYLOADSTORE_PART_WORKERS", "8")
    url, started = slow_sink
    part = part_mib * PART
    data = os.urandom(part) * parts_count
    parts = [
        {"number": n, "url": f"{url}/obj?part={n}", "headers": {"Content-Length": str(part)}}
        for n in range(1, parts_count + 1)
    ]
    interrupted_at: list[float] = []

    def ctrl_c() -> None:
        interrupted_at.append(time.monotonic())
        os.kill(os.getpid(), signal.SIGINT)

    timer = threading.Timer(0.6, ctrl_c)
    # When Ctrl-C arrives 0.6 s into the upload
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            upload_parts(
                httpx.Client(),
                {"part_bytes": part, "part_count": parts_count, "parts": parts},
                [data],
                len(data),
                ask_parts=lambda specs: {"parts": []},
                retry=RetryPolicy(max_attempts=2, base_s=0.01),
                algorithm="SHA256",
            )
        stopped_at = time.monotonic()
    finally:
        timer.cancel()
    # Then it stopped within about a second and no part was started after the interrupt
    took = stopped_at - interrupted_at[0]
    after = sum(t > interrupted_at[0] + 0.2 for t in started)
    print(
        f"ctrl-c to stop (upload, {part_mib} MiB parts): {took:.3f} s; parts started {len(started)}/{parts_count}, after: {after}"
    )
    assert took < 1.0
    assert after == 0
    assert 0 < len(started)


CHILD = """
import sys, httpx
from payloadstore._http import RetryPolicy
from payloadstore._multipart_download import download_parts
from payloadstore.cli import terminate_as_interrupt

url, size, part, target = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
terminate_as_interrupt()
print("started", flush=True)
download_parts(
    httpx.Client(),
    {"url": url, "method": "GET", "expires_at": None},
    size=size,
    multipart={"part_bytes": part, "part_count": size // part},
    presign_again=lambda: {"url": url},
    retry=RetryPolicy(max_attempts=2, base_s=0.01),
    into=target,
)
"""


def test_sigterm_stops_the_clis_download_within_a_second_and_leaves_no_temporary_file(
    slow_object, tmp_path
):
    import subprocess
    import sys

    url, data, started = slow_object
    target = tmp_path / "result.bin"
    target.write_bytes(b"the previous result")
    # Given a CLI process downloading 64 parts into a path
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, url, str(len(data)), str(PART), str(target)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PAYLOADSTORE_PART_WORKERS": "8"},
    )
    assert child.stdout is not None and child.stdout.readline().strip() == "started"
    time.sleep(0.6)
    # When it gets SIGTERM
    sent = time.monotonic()
    child.send_signal(signal.SIGTERM)
    code = child.wait(timeout=30)
    took = time.monotonic() - sent
    print(f"sigterm to exit: {took:.3f} s; ranges started {len(started)}/{PARTS}")
    # Then it exits 143 within about a second (imports and the interpreter's exit included),
    # the old file whole, no partial file left
    assert code == 143, child.stderr.read() if child.stderr else ""
    assert took < 1.5
    assert len(started) < PARTS
    assert target.read_bytes() == b"the previous result"
    assert [p.name for p in tmp_path.iterdir()] == ["result.bin"]


def test_a_result_written_into_a_path_keeps_the_old_file_on_failure_and_its_mode(tmp_path):
    from payloadstore._payloads import write_into

    target = tmp_path / "result.bin"
    target.write_bytes(b"old")
    target.chmod(0o640)
    # When a write into it fails midway (here: what is written is not bytes)
    with pytest.raises(TypeError):
        write_into(target, object())  # type: ignore[arg-type]
    # Then the old file is whole and no partial file is left
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["result.bin"]
    # and a write that succeeds replaces it, keeping its mode; a new file gets the usual mode
    write_into(target, b"new")
    assert target.read_bytes() == b"new" and target.stat().st_mode & 0o777 == 0o640
    umask = os.umask(0o022)
    os.umask(umask)
    fresh = tmp_path / "fresh.bin"
    write_into(fresh, b"x")
    assert fresh.stat().st_mode & 0o777 == 0o666 & ~umask


def fast_download_into(url: str, size: int, into) -> None:
    download_parts(
        httpx.Client(),
        {"url": url, "method": "GET", "expires_at": None},
        size=size,
        multipart={"part_bytes": PART, "part_count": PARTS},
        presign_again=lambda: {"url": url},
        retry=RetryPolicy(max_attempts=2, base_s=0.01),
        into=into,
    )


@pytest.mark.parametrize("how", ["multipart", "inline"])
def test_a_result_written_into_a_symlink_goes_to_its_target_and_the_link_stays(
    slow_object, tmp_path, monkeypatch, how
):
    from payloadstore._payloads import write_into

    monkeypatch.setattr(f"{__name__}.CHUNK_PAUSE_S", 0.0)
    url, data, _ = slow_object
    # Given a path that is a symlink to the file the user reads (latest.bin -> results/v1.bin)
    (tmp_path / "results").mkdir()
    real = tmp_path / "results" / "v1.bin"
    real.write_bytes(b"the previous result")
    link = tmp_path / "latest.bin"
    link.symlink_to(real)
    # When a result is written into the link
    if how == "multipart":
        fast_download_into(url, len(data), link)
    else:
        data = b"a small result"
        write_into(link, data)
    # Then the link is still a link, and the file it names holds the result (as open(path, "wb")
    # would have it); no temporary file is left in either directory
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert real.read_bytes() == data
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest.bin", "results"]
    assert [p.name for p in real.parent.iterdir()] == ["v1.bin"]


# Inline only: a multipart download writes its ranges out of order, so it needs a seekable
# target (as before this change).
@pytest.mark.parametrize("how", ["inline"])
def test_a_result_written_into_a_fifo_goes_through_it(slow_object, tmp_path, monkeypatch, how):
    from payloadstore._payloads import write_into

    monkeypatch.setattr(f"{__name__}.CHUNK_PAUSE_S", 0.0)
    url, data, _ = slow_object
    # Given a named pipe another process reads (as /dev/stdout or a FIFO is)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    # When a result is written into it
    if how == "multipart":
        fast_download_into(url, len(data), fifo)
    else:
        data = b"a small result"
        write_into(fifo, data)
    reader.join(timeout=10)
    # Then the reader got the bytes and the pipe is still a pipe (not replaced by a file)
    assert got == [data]
    assert fifo.is_fifo()
    assert [p.name for p in tmp_path.iterdir()] == ["pipe"]


def test_a_download_into_a_directory_is_refused_before_any_range(
    slow_object, tmp_path, monkeypatch
):
    monkeypatch.setattr(f"{__name__}.CHUNK_PAUSE_S", 0.0)
    url, data, started = slow_object
    # Given a path that is a directory
    # When a multipart result is downloaded into it
    with pytest.raises(IsADirectoryError):
        fast_download_into(url, len(data), tmp_path)
    # Then it is refused at once: no range fetched, nothing left beside it
    assert started == []
    assert list(tmp_path.iterdir()) == []


def test_a_daemons_second_signal_stops_a_download_on_a_worker_thread_within_a_second(
    slow_object, tmp_path, monkeypatch
):
    from payloadstore import Daemon
    from tests.unit.sdk_fakes import FakeWorld, make_client

    monkeypatch.setenv("PAYLOADSTORE_PART_WORKERS", "8")
    url, data, started = slow_object
    # Given a daemon's signal handlers, and a download on a worker thread (concurrency > 1: a
    # KeyboardInterrupt reaches only the main thread)
    daemon = Daemon(make_client(FakeWorld()), ["q"], concurrency=2)
    restore = daemon._install_signals()
    target = tmp_path / "args.bin"
    ended: list[float] = []
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            fast_download_into(url, len(data), target)
        except BaseException as e:  # noqa: BLE001 - looked at below
            errors.append(e)
        finally:
            ended.append(time.monotonic())

    thread = threading.Thread(target=worker, daemon=True)
    try:
        thread.start()
        time.sleep(0.6)
        # When SIGINT comes twice (the second: stop now)
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)
        interrupted_at = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1.0)
    finally:
        restore()
    thread.join(timeout=10)
    # Then the worker's download stopped within about a second, starting no range after it,
    # and left no file
    took = ended[0] - interrupted_at
    after = sum(t > interrupted_at + 0.2 for t in started)
    print(
        f"second signal to stop (worker thread): {took:.3f} s; ranges started {len(started)}/{PARTS}"
    )
    assert errors and took < 1.0
    assert after == 0
    assert list(tmp_path.iterdir()) == []
