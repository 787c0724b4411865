"""moto's S3/SSM server with the presigned-URL rules real S3 enforces and moto skips.

moto accepts a presigned URL after its `X-Amz-Expires` and stores a body whose sha256 differs from
the signed `x-amz-checksum-sha256`. Real S3 answers 403 "Request has expired" and 400 BadDigest.
Clients of the local stack (the SDK's re-presign on expiry, the CP's checksum checks) should meet
the same answers here, so this WSGI middleware adds exactly those two rules in front of moto, and
refuses a presigned request that omits a header it signed (403, as a signature mismatch would).

Run: python -m payloadstore.devstack.s3_emulator -H 127.0.0.1 -p 5000
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import os
from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qs


def _error(start_response, status: str, code: str, message: str):
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Error><Code>{code}</Code><Message>{message}</Message></Error>"
    ).encode()
    start_response(
        status, [("Content-Type", "application/xml"), ("Content-Length", str(len(body)))]
    )
    return [body]


class PresignedUrlRules:
    def __init__(self, app, clock=None):
        self.app = app
        self.clock = clock or (lambda: datetime.now(UTC))

    def __call__(self, environ, start_response):
        query = parse_qs(environ.get("QUERY_STRING", ""))
        if "X-Amz-Signature" not in query:
            return self.app(environ, start_response)
        try:
            signed_at = datetime.strptime(query["X-Amz-Date"][0], "%Y%m%dT%H%M%SZ").replace(
                tzinfo=UTC
            )
            expires_s = int(query["X-Amz-Expires"][0])
        except (KeyError, ValueError):
            return _error(
                start_response,
                "400 Bad Request",
                "AuthorizationQueryParametersError",
                "X-Amz-Date and X-Amz-Expires are required",
            )
        if self.clock() > signed_at + timedelta(seconds=expires_s):
            return _error(start_response, "403 Forbidden", "AccessDenied", "Request has expired")

        signed = set(query.get("X-Amz-SignedHeaders", [""])[0].split(";"))
        for header in signed - {"host"}:
            key = (
                "CONTENT_LENGTH"
                if header == "content-length"
                else (
                    "CONTENT_TYPE"
                    if header == "content-type"
                    else "HTTP_" + header.upper().replace("-", "_")
                )
            )
            if not environ.get(key):
                return _error(
                    start_response,
                    "403 Forbidden",
                    "SignatureDoesNotMatch",
                    f"the request omits the signed header {header}",
                )

        claimed = environ.get("HTTP_X_AMZ_CHECKSUM_SHA256")
        if environ.get("REQUEST_METHOD") == "PUT" and claimed:
            length = int(environ.get("CONTENT_LENGTH") or 0)
            body = environ["wsgi.input"].read(length) if length else b""
            actual = base64.b64encode(hashlib.sha256(body).digest()).decode()
            if actual != claimed:
                return _error(
                    start_response,
                    "400 Bad Request",
                    "BadDigest",
                    "The SHA256 you specified did not match the calculated checksum.",
                )
            environ["wsgi.input"] = io.BytesIO(body)
        return self.app(environ, start_response)


def main(argv: list[str] | None = None) -> None:
    from moto.moto_server.threaded_moto_server import (
        DomainDispatcherApplication,
        create_backend_app,
    )
    from werkzeug.serving import run_simple

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-H", "--host", default="127.0.0.1")
    parser.add_argument("-p", "--port", type=int, default=5000)
    args = parser.parse_args(argv)
    os.environ.setdefault("MOTO_PORT", str(args.port))
    app = PresignedUrlRules(DomainDispatcherApplication(create_backend_app))
    run_simple(args.host, args.port, app, threaded=True)


if __name__ == "__main__":
    main()
