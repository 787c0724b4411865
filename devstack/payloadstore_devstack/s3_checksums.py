"""S3's checksums in the emulator: a PUT's body checked against the x-amz-checksum-sha256 or
-crc64nvme it carries (400 BadDigest), the sha256 and CRC64NVME values in S3's base64 form, and
moto's multipart completion replaced by one that reads each part once and takes each part's
checksum from what was computed when it arrived."""

from __future__ import annotations

import base64
import hashlib
import tempfile

# (algorithm, base64 checksum) of a PUT's body once it was checked: not computed a second time.
VERIFIED_CHECKSUM = "payloadstore.verified_checksum"


# The checksums a PUT (object or part) may carry, checked against its body as S3 checks them:
# header name (WSGI form) -> (algorithm as S3 names it, function of the body -> base64).
def sha256_b64(data) -> str:
    return base64.b64encode(hashlib.sha256(data).digest()).decode()


def crc64nvme_b64(data) -> str:
    from awscrt import checksums

    return base64.b64encode(checksums.crc64nvme(data).to_bytes(8, "big")).decode()


CHECKED_ALGORITHMS = {
    "HTTP_X_AMZ_CHECKSUM_SHA256": "SHA256",
    "HTTP_X_AMZ_CHECKSUM_CRC64NVME": "CRC64NVME",
}


def claimed_checksum(environ) -> tuple[str, str] | None:
    """(algorithm, base64 value) of the checksum header a request carries, or None."""
    for header, algorithm in CHECKED_ALGORITHMS.items():
        value = environ.get(header)
        if value:
            return algorithm, value
    return None


def verify_put_body(environ) -> tuple[str, str, str] | None:
    """A PUT carrying x-amz-checksum-sha256 or -crc64nvme: its body is read (checksummed as it
    is read, kept in a spooled file: a multi-GiB blob is not held in memory twice) and refused
    as S3 refuses it, 400 BadDigest, when the checksum differs. The body is handed on with the
    computed value (VERIFIED_CHECKSUM), so it is not computed a second time."""
    claimed = claimed_checksum(environ)
    if environ.get("REQUEST_METHOD") != "PUT" or claimed is None:
        return None
    if (environ.get("HTTP_X_AMZ_CONTENT_SHA256") or "").startswith("STREAMING") or (
        "aws-chunked" in (environ.get("HTTP_CONTENT_ENCODING") or "")
    ):
        return None  # a chunked body with a trailing checksum: moto decodes it
    algorithm, value = claimed
    length = int(environ.get("CONTENT_LENGTH") or 0)
    body = tempfile.SpooledTemporaryFile(max_size=64 * 1024 * 1024)  # noqa: SIM115 - handed to moto as its input
    digest = hashlib.sha256()
    crc = [0]

    def feed(chunk: bytes) -> None:
        if algorithm == "SHA256":
            digest.update(chunk)
        else:
            from awscrt import checksums

            crc[0] = checksums.crc64nvme(chunk, crc[0])

    left = length
    while left > 0:
        chunk = environ["wsgi.input"].read(min(left, 8 * 1024 * 1024))
        if not chunk:
            break
        feed(chunk)
        body.write(chunk)
        left -= len(chunk)
    raw = digest.digest() if algorithm == "SHA256" else crc[0].to_bytes(8, "big")
    actual = base64.b64encode(raw).decode()
    if actual != value:
        body.close()
        return (
            "400 Bad Request",
            "BadDigest",
            f"The {algorithm} you specified did not match the calculated checksum.",
        )
    body.seek(0)
    environ["wsgi.input"] = body
    environ[VERIFIED_CHECKSUM] = (algorithm, actual)
    # S3 keeps the checksum of any PUT that carried one; moto only when the SDK's algorithm
    # header names it.
    environ.setdefault("HTTP_X_AMZ_SDK_CHECKSUM_ALGORITHM", algorithm)
    return None


# upload id -> {part number: base64 checksum} of the parts the emulator took (and checked).
PART_DIGESTS: dict[str, dict[int, str]] = {}


def _complete_reading_each_part_once(self, body):
    """moto's FakeMultipart.complete, reading each part once (moto reads it twice, and copies
    the whole object twice more for a FULL_OBJECT checksum) and taking each part's checksum
    from what the emulator computed when the part arrived: a SHA256 upload's COMPOSITE checksum
    from the parts' sha256s, a CRC64NVME upload's FULL_OBJECT checksum by combining the parts'
    CRCs (no byte read again). The same object and ETag; any other checksum goes to moto's own."""
    from moto.s3.exceptions import EntityTooSmall, InvalidPart, MalformedXML
    from moto.s3.models import S3_UPLOAD_PART_MIN_SIZE

    algorithm = (self.metadata.get("x-amz-checksum-algorithm") or "").upper()
    kind = self.metadata.get("x-amz-checksum-type") or (
        "FULL_OBJECT" if algorithm == "CRC64NVME" else "COMPOSITE"
    )
    if (algorithm, kind) not in (("SHA256", "COMPOSITE"), ("CRC64NVME", "FULL_OBJECT")):
        return _MOTO_COMPLETE[0](self, body)
    known = PART_DIGESTS.get(self.id, {})
    total, md5s, digests = bytearray(), bytearray(), bytearray()
    crc = 0
    last = None
    for number, etag in body:
        part = self.parts.get(number)
        if part is None or part.etag.replace('"', "") != etag.replace('"', ""):
            raise InvalidPart()
        if last is not None and last.contentsize < S3_UPLOAD_PART_MIN_SIZE:
            raise EntityTooSmall()
        value = part.value
        md5s.extend(bytes.fromhex(part.etag.replace('"', "")))
        total.extend(value)
        digest = known.get(number)
        if algorithm == "SHA256":
            digests.extend(base64.b64decode(digest) if digest else hashlib.sha256(value).digest())
        else:
            part_crc = base64.b64decode(digest if digest else crc64nvme_b64(value))
            crc = crc_combine(crc, int.from_bytes(part_crc, "big"), len(value))
        last = part
    count = len(md5s) // 16
    if not count:
        raise MalformedXML
    etag = f"{hashlib.md5(bytes(md5s)).hexdigest()}-{count}"
    # The bytearray itself (moto's FakeKey writes it to its buffer): no copy into bytes first.
    if algorithm == "CRC64NVME":
        full = base64.b64encode(crc.to_bytes(8, "big")).decode()
        return total, etag, ("FULL_OBJECT", full, 1)
    composite = base64.b64encode(hashlib.sha256(bytes(digests)).digest()).decode()
    return total, etag, ("COMPOSITE", composite, count)


def crc_combine(first: int, second: int, second_length: int) -> int:
    from awscrt import checksums

    return checksums.combine_crc64nvme(first, second, second_length) if second_length else first


_MOTO_COMPLETE: list = []


def install_fast_complete() -> None:
    from moto.s3.models import FakeMultipart

    if not _MOTO_COMPLETE:
        _MOTO_COMPLETE.append(FakeMultipart.complete)
        FakeMultipart.complete = _complete_reading_each_part_once
