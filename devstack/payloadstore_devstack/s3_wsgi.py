"""The WSGI plumbing the S3 emulator's layers share: S3's XML errors, request headers and target
as the client sent them, an inner application's answer captured and sent on, and moto's stored
objects looked up by bucket and key."""

from __future__ import annotations

import io
from urllib.parse import quote


def s3_error_body(code: str, message: str) -> bytes:
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Error><Code>{code}</Code><Message>{message}</Message></Error>"
    ).encode()


def s3_error(start_response, status: str, code: str, message: str):
    body = s3_error_body(code, message)
    start_response(
        status, [("Content-Type", "application/xml"), ("Content-Length", str(len(body)))]
    )
    return [body]


def wsgi_header(environ: dict, name: str) -> str | None:
    if name == "content-type":
        return environ.get("CONTENT_TYPE") or None
    if name == "content-length":
        return environ.get("CONTENT_LENGTH") or None
    if name == "host":
        return environ.get("HTTP_HOST") or None
    return environ.get("HTTP_" + name.upper().replace("-", "_"))


def raw_target(environ: dict) -> tuple[str, str]:
    """The path and query exactly as the client sent them (the signature covers the bytes)."""
    raw = environ.get("RAW_URI") or environ.get("REQUEST_URI")
    if raw:
        path, _, query = raw.partition("?")
        return path, query
    return quote(environ.get("PATH_INFO", ""), safe="/~!$&'()*+,;=:@%"), environ.get(
        "QUERY_STRING", ""
    )


def captured(app, environ) -> tuple[str, list[tuple[str, str]], bytes]:
    """(status, headers, body) of `app`'s answer to `environ`."""
    answer: dict = {}

    def capture(status, headers, exc_info=None):
        answer["status"], answer["headers"] = status, list(headers)
        return lambda _data: None

    chunks = app(environ, capture)
    try:
        body = b"".join(chunks)
    finally:
        getattr(chunks, "close", lambda: None)()
    return answer["status"], answer["headers"], body


def respond(start_response, status: str, headers: list[tuple[str, str]], body: bytes):
    kept = [(n, v) for n, v in headers if n.lower() != "content-length"]
    start_response(status, [*kept, ("Content-Length", str(len(body)))])
    return [body]


def read_body(environ) -> bytes:
    length = int(environ.get("CONTENT_LENGTH") or 0)
    body = environ["wsgi.input"].read(length) if length else b""
    environ["wsgi.input"] = io.BytesIO(body)
    return body


def stored_object(bucket: str, key: str):
    """moto's stored object (a FakeKey), or None."""
    try:
        from moto.s3.models import s3_backends

        partition, account = s3_backends.bucket_accounts[bucket]
        return s3_backends[account][partition].get_object(bucket, key)
    except Exception:  # noqa: BLE001 - whatever moto says, it answers itself
        return None


def copy_source(header: str) -> tuple[str, str] | None:
    """(bucket, key) of an `x-amz-copy-source` header (`/bucket/key` or `bucket/key`, URL-encoded,
    maybe with `?versionId=`)."""
    from urllib.parse import unquote

    path = unquote(header.partition("?")[0]).lstrip("/")
    bucket, _, key = path.partition("/")
    return (bucket, key) if bucket and key else None
