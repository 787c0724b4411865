"""S3's rules for multipart uploads in the emulator, which moto leaves out: each part's checksum
checked and kept, ListParts and CompleteMultipartUpload answering them, the object's checksum
(COMPOSITE SHA256, FULL_OBJECT CRC64NVME), a long completion kept alive as S3 does, and ranged
GETs read at their offset. Sits behind the signature and grant checks (s3_sigv4)."""

from __future__ import annotations

import base64
import hashlib
import re
import threading
from dataclasses import dataclass, field
from urllib.parse import parse_qs
from xml.etree import ElementTree

from payloadstore_devstack.s3_checksums import (
    PART_DIGESTS,
    VERIFIED_CHECKSUM,
    claimed_checksum,
    crc64nvme_b64,
    crc_combine,
    install_fast_complete,
    sha256_b64,
)
from payloadstore_devstack.s3_wsgi import (
    captured,
    copy_source,
    read_body,
    respond,
    s3_error,
    s3_error_body,
    stored_object,
)


def _local_tag(element) -> str:
    return element.tag.rpartition("}")[2]


_RANGE = re.compile(r"^bytes=(\d+)-(\d*)$")
_XML_DECLARATION = re.compile(rb"^\s*<\?xml[^>]*\?>\s*")
# A completion answers at once when moto is done this soon; otherwise it keeps the connection
# alive with a space this often (S3 does the same for a CompleteMultipartUpload that takes long).
KEEPALIVE_S = 1.0
# How long a HEAD/GET/ListParts waits for a completion in progress before answering anyway.
COMPLETION_WAIT_S = 300.0
_PART_NUMBER = re.compile(rb"<Part>(\s*)<PartNumber>(\d+)</PartNumber>")


@dataclass
class _Upload:
    """What the emulator keeps of a multipart upload in progress."""

    algorithm: str = ""  # SHA256 | CRC64NVME | "" (none named)
    kind: str = ""  # COMPOSITE | FULL_OBJECT | ""
    parts: dict[int, tuple[str, int]] = field(default_factory=dict)  # number -> (b64, size)


def _invalid_request(message: str) -> tuple[str, str, str]:
    return "400 Bad Request", "InvalidRequest", message


class MultipartChecksums:
    """S3's checksum rules for multipart uploads, and ranged GETs served at their offset (see
    the module's docstring). Sits between PresignedUrlRules and moto: every request reaching it
    was allowed already."""

    def __init__(self, app):
        self.app = app
        install_fast_complete()
        self._lock = threading.Lock()
        self._uploads: dict[str, _Upload] = {}
        # "bucket/key" and upload id -> set when a completion in progress is stored
        self._completing: dict[str, threading.Event] = {}

    def __call__(self, environ, start_response):
        method = environ.get("REQUEST_METHOD", "GET")
        query = parse_qs(environ.get("QUERY_STRING", ""), keep_blank_values=True)
        bucket, _, key = environ.get("PATH_INFO", "").lstrip("/").partition("/")
        upload = query.get("uploadId", [""])[0]
        if not key:
            return self.app(environ, start_response)
        if method == "POST" and "uploads" in query:
            return self._create(environ, start_response)
        if method == "PUT" and upload and "partNumber" in query:
            return self._upload_part(environ, start_response, upload, query)
        # Any request on a key or upload being completed waits for it (S3 completes atomically).
        self.wait_for_completion(environ.get("PATH_INFO", "").lstrip("/"), upload)
        if method == "GET" and upload:
            return self._list_parts(environ, start_response, upload)
        if method == "POST" and upload:
            return self._complete(environ, start_response, upload)
        if method == "DELETE" and upload:
            with self._lock:
                self._uploads.pop(upload, None)
                PART_DIGESTS.pop(upload, None)
        if method == "HEAD" and environ.get("HTTP_X_AMZ_CHECKSUM_MODE") == "ENABLED":
            return self._head(environ, start_response, bucket, key)
        if (
            method == "GET"
            and environ.get("HTTP_RANGE")
            and not any(not name.startswith("X-Amz-") for name in query)
        ):
            served = self._range(environ, start_response, bucket, key)
            if served is not None:
                return served
        return self.app(environ, start_response)

    def _create(self, environ, start_response):
        algorithm = (environ.get("HTTP_X_AMZ_CHECKSUM_ALGORITHM") or "").upper()
        kind = (environ.get("HTTP_X_AMZ_CHECKSUM_TYPE") or "").upper()
        # S3: CRC64NVME is FULL_OBJECT only; the SHA algorithms are COMPOSITE only.
        if algorithm == "CRC64NVME" and kind == "COMPOSITE":
            return s3_error(
                start_response,
                *_invalid_request(
                    "The COMPOSITE checksum type cannot be used with the crc64nvme checksum "
                    "algorithm."
                ),
            )
        if algorithm == "SHA256" and kind == "FULL_OBJECT":
            return s3_error(
                start_response,
                *_invalid_request(
                    "The FULL_OBJECT checksum type cannot be used with the sha256 checksum "
                    "algorithm."
                ),
            )
        if algorithm and not kind:
            kind = "FULL_OBJECT" if algorithm == "CRC64NVME" else "COMPOSITE"
        status, headers, body = captured(self.app, environ)
        found = re.search(rb"<UploadId>([^<]+)</UploadId>", body)
        if status.startswith("200") and found:
            with self._lock:
                self._uploads[found.group(1).decode()] = _Upload(algorithm, kind)
            if kind:
                headers = [*headers, ("x-amz-checksum-type", kind)]
        return respond(start_response, status, headers, body)

    def _upload_part(self, environ, start_response, upload: str, query: dict):
        if environ.get("HTTP_X_AMZ_COPY_SOURCE"):
            return self._upload_part_copy(environ, start_response, upload, query)
        streaming = (environ.get("HTTP_X_AMZ_CONTENT_SHA256") or "").startswith("STREAMING")
        if streaming or "aws-chunked" in (environ.get("HTTP_CONTENT_ENCODING") or ""):
            return self.app(environ, start_response)  # a chunked body: moto decodes it
        with self._lock:
            state = self._uploads.get(upload) or _Upload()
        claimed = claimed_checksum(environ)
        if claimed is not None and state.algorithm and claimed[0] != state.algorithm:
            return s3_error(
                start_response,
                *_invalid_request(
                    "Checksum Type mismatch occurred, expected checksum Type: "
                    f"{state.algorithm.lower()}, actual checksum Type: {claimed[0].lower()}"
                ),
            )
        if state.algorithm == "SHA256" and claimed is None:
            # A COMPOSITE upload needs each part's checksum (a FULL_OBJECT one does not: S3
            # computes the part's CRC itself).
            return s3_error(
                start_response,
                *_invalid_request(
                    "Checksum Type mismatch occurred, expected checksum Type: sha256, "
                    "actual checksum Type: null"
                ),
            )
        verified = environ.get(VERIFIED_CHECKSUM)
        body = read_body(environ)
        algorithm = state.algorithm or (claimed[0] if claimed else "SHA256")
        if verified is not None and verified[0] == algorithm:
            actual = verified[1]
        else:
            actual = sha256_b64(body) if algorithm == "SHA256" else crc64nvme_b64(body)
        if claimed is not None and claimed[1] != actual:
            return s3_error(
                start_response,
                "400 Bad Request",
                "BadDigest",
                f"The {algorithm} you specified did not match the calculated checksum.",
            )
        status, headers, answer = captured(self.app, environ)
        if status.startswith("200"):
            number = int(query["partNumber"][0])
            with self._lock:
                self._uploads.setdefault(upload, state).parts[number] = (actual, len(body))
                PART_DIGESTS.setdefault(upload, {})[number] = actual
            headers = [*headers, (f"x-amz-checksum-{algorithm.lower()}", actual)]
        return respond(start_response, status, headers, answer)

    def _upload_part_copy(self, environ, start_response, upload: str, query: dict):
        """UploadPartCopy: moto copies the range; S3 also computes the part's checksum for an
        upload created with one, answers it in CopyPartResult and keeps it for the completion."""
        status, headers, body = captured(self.app, environ)
        if not status.startswith("200"):
            return respond(start_response, status, headers, body)
        with self._lock:
            state = self._uploads.get(upload) or _Upload()
        source = copy_source(environ.get("HTTP_X_AMZ_COPY_SOURCE", ""))
        stored = stored_object(*source) if source else None
        if state.algorithm in ("SHA256", "CRC64NVME") and stored is not None:
            m = _RANGE.match(environ.get("HTTP_X_AMZ_COPY_SOURCE_RANGE", "").strip())
            begin, end = (int(m.group(1)), int(m.group(2))) if m and m.group(2) else (0, None)
            with stored.lock:
                stored._value_buffer.seek(begin)
                data = stored._value_buffer.read(None if end is None else end - begin + 1)
            if state.algorithm == "SHA256":
                actual = sha256_b64(data)
            else:
                actual = crc64nvme_b64(data)
            number = int(query["partNumber"][0])
            with self._lock:
                self._uploads.setdefault(upload, state).parts[number] = (actual, len(data))
                PART_DIGESTS.setdefault(upload, {})[number] = actual
            name = "ChecksumSHA256" if state.algorithm == "SHA256" else "ChecksumCRC64NVME"
            body = body.replace(b"</ETag>", f"</ETag><{name}>{actual}</{name}>".encode(), 1)
        return respond(start_response, status, headers, body)

    def _list_parts(self, environ, start_response, upload: str):
        status, headers, body = captured(self.app, environ)
        with self._lock:
            state = self._uploads.get(upload) or _Upload()
            known = dict(state.parts)
        tag = "ChecksumCRC64NVME" if state.algorithm == "CRC64NVME" else "ChecksumSHA256"

        def with_checksum(m: re.Match) -> bytes:
            digest = known.get(int(m.group(2)))
            extra = f"<{tag}>{digest[0]}</{tag}>".encode() if digest else b""
            return m.group(0) + extra

        if status.startswith("200"):
            body = _PART_NUMBER.sub(with_checksum, body)
            if state.algorithm:
                body = body.replace(
                    b"</UploadId>",
                    f"</UploadId><ChecksumAlgorithm>{state.algorithm}</ChecksumAlgorithm>"
                    f"<ChecksumType>{state.kind}</ChecksumType>".encode(),
                    1,
                )
        return respond(start_response, status, headers, body)

    def _complete(self, environ, start_response, upload: str):
        request = read_body(environ)
        with self._lock:
            state = self._uploads.get(upload) or _Upload()
            known = dict(state.parts)
        tag = "ChecksumCRC64NVME" if state.algorithm == "CRC64NVME" else "ChecksumSHA256"
        named: list[tuple[int, str | None]] = []
        try:
            for part in ElementTree.fromstring(request or b"<x/>"):
                if _local_tag(part) != "Part":
                    continue
                fields = {_local_tag(e): (e.text or "").strip() for e in part}
                named.append((int(fields.get("PartNumber", "0")), fields.get(tag)))
        except (ElementTree.ParseError, ValueError):
            return s3_error(start_response, "400 Bad Request", "MalformedXML", "Malformed XML")
        refused = self._completion_refused(environ, state, named, known)
        if refused is not None:
            return s3_error(start_response, *refused)
        return self._complete_in_background(environ, start_response, upload, named, known)

    @staticmethod
    def _completion_refused(environ, state: _Upload, named, known) -> tuple[str, str, str] | None:
        """Why S3 would refuse this CompleteMultipartUpload for its checksums, or None.

        A COMPOSITE (SHA256) upload must name each part's checksum as uploaded. A FULL_OBJECT
        (CRC64NVME) one may name them (each must be the part's), may say its type
        (x-amz-checksum-type: it must be the upload's) and may give the whole object's CRC
        (x-amz-checksum-crc64nvme), which S3 checks against the parts' CRCs combined: a part
        swapped for other bytes of the same length makes that 400 BadDigest."""
        invalid_part = (
            "400 Bad Request",
            "InvalidPart",
            (
                "One or more of the specified parts could not be found. The part may not have "
                "been uploaded, or the specified checksum may not have matched the part's."
            ),
        )
        kind = (environ.get("HTTP_X_AMZ_CHECKSUM_TYPE") or "").upper()
        if kind and state.kind and kind != state.kind:
            return _invalid_request(
                f"The upload was created using the {state.kind} checksum mode. The complete "
                "request must use the same checksum mode."
            )
        if state.algorithm == "SHA256":
            if any(not d or known.get(n, ("", 0))[0] != d for n, d in named):
                return invalid_part
            return None
        if state.algorithm != "CRC64NVME":
            return None
        if any(d and known.get(n, ("", 0))[0] != d for n, d in named):
            return invalid_part
        claimed = environ.get("HTTP_X_AMZ_CHECKSUM_CRC64NVME")
        if claimed and all(n in known for n, _ in named):
            crc = 0
            for number, _ in named:
                b64, size = known[number]
                crc = crc_combine(crc, int.from_bytes(base64.b64decode(b64), "big"), size)
            if base64.b64encode(crc.to_bytes(8, "big")).decode() != claimed:
                return (
                    "400 Bad Request",
                    "BadDigest",
                    "The crc64nvme you specified did not match the calculated checksum.",
                )
        return None

    def _complete_in_background(self, environ, start_response, upload, named, known):
        """moto assembles the object (seconds for a GiB) while the answer keeps the connection
        alive as S3 does: a 200 at once, then a space every KEEPALIVE_S, then the result or an
        <Error> (botocore reads a 200 with an error body as the error). Until it is stored,
        HEAD/GET of the key and ListParts of the upload wait, so no reader sees the upload gone
        and the object not yet there (S3 completes atomically)."""
        path = environ.get("PATH_INFO", "").lstrip("/")
        done = threading.Event()
        outcome: dict = {}
        with self._lock:
            self._completing[path] = self._completing[upload] = done

        def work() -> None:
            try:
                outcome["answer"] = captured(self.app, environ)
            except Exception as e:  # noqa: BLE001 - answered as S3's InternalError
                outcome["answer"] = (
                    "500 Internal Server Error",
                    [],
                    s3_error_body("InternalError", str(e)),
                )
            finally:
                status, headers, body = outcome["answer"]
                outcome["answer"] = (
                    status,
                    headers,
                    self._completed(upload, named, known, status, body),
                )
                with self._lock:
                    self._completing.pop(path, None)
                    self._completing.pop(upload, None)
                done.set()

        threading.Thread(target=work, name=f"complete-{upload[:8]}", daemon=True).start()
        if done.wait(KEEPALIVE_S):
            return respond(start_response, *outcome["answer"])
        start_response("200 OK", [("Content-Type", "application/xml")])

        def kept_alive():
            yield b'<?xml version="1.0" encoding="UTF-8"?>\n'
            while not done.wait(KEEPALIVE_S):
                yield b" "
            yield _XML_DECLARATION.sub(b"", outcome["answer"][2], count=1)

        return kept_alive()

    def _completed(self, upload, named, known, status: str, body: bytes) -> bytes:
        """The completion's answer with S3's object checksum; the upload forgotten."""
        with self._lock:
            state = self._uploads.get(upload) or _Upload()
        if status.startswith("200") and state.algorithm == "SHA256":
            raw = b"".join(base64.b64decode(known[n][0]) for n, _ in named)
            composite = f"{base64.b64encode(hashlib.sha256(raw).digest()).decode()}-{len(named)}"
            body = body.replace(
                b"</ETag>", f"</ETag><ChecksumSHA256>{composite}</ChecksumSHA256>".encode(), 1
            )
        if (
            status.startswith("200")
            and state.algorithm == "CRC64NVME"
            and "<Checksum" not in (body.decode("utf-8", "replace"))
        ):
            crc = 0
            for number, _ in named:
                b64, size = known.get(number, ("", 0))
                if b64:
                    crc = crc_combine(crc, int.from_bytes(base64.b64decode(b64), "big"), size)
            full = base64.b64encode(crc.to_bytes(8, "big")).decode()
            body = body.replace(
                b"</ETag>",
                f"</ETag><ChecksumCRC64NVME>{full}</ChecksumCRC64NVME>"
                "<ChecksumType>FULL_OBJECT</ChecksumType>".encode(),
                1,
            )
        if status.startswith("200"):
            with self._lock:
                self._uploads.pop(upload, None)
        return body

    def wait_for_completion(self, *names: str) -> None:
        """Block while a completion of this key or upload is being assembled."""
        with self._lock:
            pending = [self._completing[n] for n in names if n in self._completing]
        for event in pending:
            event.wait(COMPLETION_WAIT_S)

    def _head(self, environ, start_response, bucket: str, key: str):
        """HeadObject answers a composite checksum as S3 does, "<b64>-<parts>" (moto leaves
        the part count out of HEAD)."""
        status, headers, body = captured(self.app, environ)
        stored = stored_object(bucket, key) if status.startswith("200") else None
        if stored is not None and getattr(stored, "checksum_type", None) == "COMPOSITE":
            parts = stored.checksum_parts
            headers = [
                (
                    n,
                    f"{v}-{parts}"
                    if n.lower().startswith("x-amz-checksum-")
                    and "-" not in v
                    and n.lower() != "x-amz-checksum-type"
                    else v,
                )
                for n, v in headers
            ]
        names = {n.lower() for n, _ in headers}
        if "x-amz-checksum-crc64nvme" in names and "x-amz-checksum-type" not in names:
            # S3 answers the type of every CRC64NVME object (a single PUT's too): FULL_OBJECT.
            headers = [*headers, ("x-amz-checksum-type", "FULL_OBJECT")]
        start_response(status, headers)
        return [body]

    def _range(self, environ, start_response, bucket: str, key: str):
        """A single byte range of a stored object read at its offset, or None (moto answers:
        no such object, an unsatisfiable or other range, anything unexpected)."""
        m = _RANGE.match(environ.get("HTTP_RANGE", "").strip())
        if not m:
            return None
        stored = stored_object(bucket, key)
        if stored is None or not getattr(stored, "contentsize", 0):
            return None
        size = stored.contentsize
        begin = int(m.group(1))
        end = min(int(m.group(2)) if m.group(2) else size - 1, size - 1)
        if begin > end:
            return None
        with stored.lock:
            stored._value_buffer.seek(begin)
            data = stored._value_buffer.read(end - begin + 1)
        headers = [
            ("Content-Type", stored.metadata.get("Content-Type") or "binary/octet-stream"),
            ("Content-Range", f"bytes {begin}-{end}/{size}"),
            ("Accept-Ranges", "bytes"),
            ("ETag", stored.etag),
            ("Last-Modified", stored.last_modified_RFC1123),
        ]
        return respond(start_response, "206 Partial Content", headers, data)
