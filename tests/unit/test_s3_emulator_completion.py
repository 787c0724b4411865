"""The emulator completes a multipart upload as S3 does when assembling takes long: a 200 at once,
spaces to keep the connection alive, then the result; readers of the key wait until it is stored
(a retried enqueue once found the upload gone and the object not yet there: 409 not_uploaded)."""

from __future__ import annotations

import io
import threading
import time
from xml.etree import ElementTree

from payloadstore_devstack import s3_multipart

RESULT = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<CompleteMultipartUploadResult>'
    b"<Key>k</Key><ETag>&quot;e-2&quot;</ETag></CompleteMultipartUploadResult>"
)


class SlowStore:
    """Stands for moto: a completion that takes `seconds`; records when a HEAD was answered."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.stored_at: float | None = None
        self.head_answered_at: float | None = None

    def __call__(self, environ, start_response):
        if environ["REQUEST_METHOD"] == "POST":
            time.sleep(self.seconds)
            self.stored_at = time.monotonic()
            start_response("200 OK", [("Content-Type", "application/xml")])
            return [RESULT]
        self.head_answered_at = time.monotonic()
        start_response("200 OK", [])
        return [b""]


def _environ(method: str, query: str = "") -> dict:
    return {
        "REQUEST_METHOD": method,
        "PATH_INFO": "/bucket/payloads/k",
        "QUERY_STRING": query,
        "CONTENT_LENGTH": "0",
        "wsgi.input": io.BytesIO(b""),
    }


def _call(app, environ) -> tuple[str, bytes]:
    answer: dict = {}

    def start_response(status, headers, exc_info=None):
        answer["status"] = status

    body = b"".join(app(environ, start_response))
    return answer["status"], body


def test_a_slow_completion_answers_200_at_once_then_keeps_alive_then_the_result(monkeypatch):
    # Given a store that takes 2.5 s to assemble the object, and a keep-alive every 0.5 s
    monkeypatch.setattr(s3_multipart, "KEEPALIVE_S", 0.5)
    store = SlowStore(2.5)
    app = s3_multipart.MultipartChecksums(store)
    # When the upload is completed
    status, body = _call(app, _environ("POST", "uploadId=u1"))
    # Then the answer is a 200 whose body is spaces after the declaration, then the result,
    # and it parses as the XML botocore reads
    assert status.startswith("200")
    assert body.startswith(b'<?xml version="1.0" encoding="UTF-8"?>\n   ')
    root = ElementTree.fromstring(body)
    assert root.tag == "CompleteMultipartUploadResult"


def test_a_head_of_the_key_during_a_completion_waits_until_the_object_is_stored(monkeypatch):
    # Given a completion that takes 1.5 s
    monkeypatch.setattr(s3_multipart, "KEEPALIVE_S", 0.2)
    store = SlowStore(1.5)
    app = s3_multipart.MultipartChecksums(store)
    completing = threading.Thread(target=_call, args=(app, _environ("POST", "uploadId=u2")))
    completing.start()
    time.sleep(0.3)
    # When the key is read while it is being assembled
    _call(app, _environ("HEAD"))
    completing.join()
    # Then the read was answered only once the object was stored
    assert store.stored_at is not None and store.head_answered_at is not None
    assert store.head_answered_at >= store.stored_at


def test_a_quick_completion_answers_as_before(monkeypatch):
    store = SlowStore(0.0)
    app = s3_multipart.MultipartChecksums(store)
    status, body = _call(app, _environ("POST", "uploadId=u3"))
    assert status.startswith("200")
    assert body == RESULT
