"""The S3 emulator checks CRC64NVME as S3 does, driven by botocore's own client over HTTP: a
single PUT's checksum, a FULL_OBJECT multipart upload's parts and whole object (the CRC given at
completion is checked against the parts' CRCs combined), and the checksum types S3 refuses."""

from __future__ import annotations

import base64
import os
import uuid

import pytest
from awscrt import checksums
from botocore.exceptions import ClientError

PART = 5 * 1024 * 1024  # S3's smallest part but the last


def crc_b64(data: bytes) -> str:
    return base64.b64encode(checksums.crc64nvme(data).to_bytes(8, "big")).decode()


def _code(e: pytest.ExceptionInfo) -> str:
    return e.value.response["Error"]["Code"]


@pytest.fixture(scope="module")
def s3(s3_client, moto_server):
    """botocore's S3 client against the emulator, not retrying a refusal (each is final)."""
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3",
        endpoint_url=moto_server.endpoint,
        region_name=s3_client.meta.region_name,
        config=Config(signature_version="s3v4", retries={"max_attempts": 1}),
    )


@pytest.fixture
def bucket(payload_bucket) -> str:
    return payload_bucket


@pytest.fixture
def key() -> str:
    return f"payloads/crc/{uuid.uuid4().hex}"


def test_put_with_the_right_crc64nvme_is_stored_and_answered_by_head(s3, bucket, key):
    # Given bytes and their CRC64NVME
    data = os.urandom(100_000)
    # When botocore PUTs them with that checksum
    s3.put_object(Bucket=bucket, Key=key, Body=data, ChecksumCRC64NVME=crc_b64(data))
    # Then HEAD with checksum mode answers it, FULL_OBJECT, as S3 does
    head = s3.head_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED")
    assert head["ChecksumCRC64NVME"] == crc_b64(data)
    assert head["ChecksumType"] == "FULL_OBJECT"


def test_put_whose_body_differs_from_its_crc64nvme_is_bad_digest(s3, bucket, key):
    data = os.urandom(10_000)
    with pytest.raises(ClientError) as e:
        s3.put_object(
            Bucket=bucket, Key=key, Body=data, ChecksumCRC64NVME=crc_b64(data[:-1] + b"x")
        )
    assert _code(e) == "BadDigest"
    with pytest.raises(ClientError):
        s3.head_object(Bucket=bucket, Key=key)


def test_a_composite_crc64nvme_upload_is_refused_as_s3_refuses_it(s3, bucket, key):
    with pytest.raises(ClientError) as e:
        s3.create_multipart_upload(
            Bucket=bucket, Key=key, ChecksumAlgorithm="CRC64NVME", ChecksumType="COMPOSITE"
        )
    assert _code(e) == "InvalidRequest"
    assert "COMPOSITE checksum type cannot be used with the crc64nvme" in str(e.value)


def _upload(s3, bucket, key, parts: list[bytes], *, part_checksums: bool = True):
    upload = s3.create_multipart_upload(
        Bucket=bucket, Key=key, ChecksumAlgorithm="CRC64NVME", ChecksumType="FULL_OBJECT"
    )["UploadId"]
    done = []
    for number, data in enumerate(parts, start=1):
        extra = {"ChecksumCRC64NVME": crc_b64(data)} if part_checksums else {}
        r = s3.upload_part(
            Bucket=bucket, Key=key, UploadId=upload, PartNumber=number, Body=data, **extra
        )
        done.append({"PartNumber": number, "ETag": r["ETag"]})
    return upload, done


def test_full_object_upload_is_verified_whole_at_completion(s3, bucket, key):
    # Given a CRC64NVME FULL_OBJECT upload of two parts, each with its own CRC
    parts = [os.urandom(PART), os.urandom(1234)]
    upload, done = _upload(s3, bucket, key, parts)
    whole = b"".join(parts)
    # When it is completed with the whole object's CRC and type
    s3.complete_multipart_upload(
        Bucket=bucket,
        Key=key,
        UploadId=upload,
        MultipartUpload={"Parts": done},
        ChecksumCRC64NVME=crc_b64(whole),
        ChecksumType="FULL_OBJECT",
    )
    # Then the object is stored with that CRC, FULL_OBJECT (no "-N" part count)
    head = s3.head_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED")
    assert head["ChecksumCRC64NVME"] == crc_b64(whole)
    assert head["ChecksumType"] == "FULL_OBJECT"
    got = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    assert got == whole


def test_a_part_swapped_for_other_bytes_of_the_same_length_is_refused_at_completion(
    s3, bucket, key
):
    # Given a FULL_OBJECT upload whose second part was replaced by other bytes of its length
    # (parts sent without their own checksum: S3 computes each part's CRC itself)
    parts = [os.urandom(PART), os.urandom(PART)]
    upload, done = _upload(s3, bucket, key, parts, part_checksums=False)
    swapped = os.urandom(PART)
    r = s3.upload_part(Bucket=bucket, Key=key, UploadId=upload, PartNumber=2, Body=swapped)
    done[1]["ETag"] = r["ETag"]
    # When it is completed with the CRC of the bytes the uploader meant
    with pytest.raises(ClientError) as e:
        s3.complete_multipart_upload(
            Bucket=bucket,
            Key=key,
            UploadId=upload,
            MultipartUpload={"Parts": done},
            ChecksumCRC64NVME=crc_b64(b"".join(parts)),
            ChecksumType="FULL_OBJECT",
        )
    # Then S3 refuses it and stores nothing
    assert _code(e) == "BadDigest"
    with pytest.raises(ClientError):
        s3.head_object(Bucket=bucket, Key=key)


def test_a_part_whose_body_differs_from_its_crc_is_bad_digest(s3, bucket, key):
    upload = s3.create_multipart_upload(Bucket=bucket, Key=key, ChecksumAlgorithm="CRC64NVME")[
        "UploadId"
    ]
    data = os.urandom(1000)
    with pytest.raises(ClientError) as e:
        s3.upload_part(
            Bucket=bucket,
            Key=key,
            UploadId=upload,
            PartNumber=1,
            Body=data,
            ChecksumCRC64NVME=crc_b64(b"other"),
        )
    assert _code(e) == "BadDigest"


def test_a_sha256_part_of_a_crc64nvme_upload_is_a_type_mismatch(s3, bucket, key):
    upload = s3.create_multipart_upload(Bucket=bucket, Key=key, ChecksumAlgorithm="CRC64NVME")[
        "UploadId"
    ]
    import hashlib

    data = os.urandom(1000)
    with pytest.raises(ClientError) as e:
        s3.upload_part(
            Bucket=bucket,
            Key=key,
            UploadId=upload,
            PartNumber=1,
            Body=data,
            ChecksumSHA256=base64.b64encode(hashlib.sha256(data).digest()).decode(),
        )
    assert _code(e) == "InvalidRequest"


def test_completion_naming_another_checksum_type_is_refused(s3, bucket, key):
    upload, done = _upload(s3, bucket, key, [os.urandom(100)])
    with pytest.raises(ClientError) as e:
        s3.complete_multipart_upload(
            Bucket=bucket,
            Key=key,
            UploadId=upload,
            MultipartUpload={"Parts": done},
            ChecksumType="COMPOSITE",
        )
    assert _code(e) == "InvalidRequest"
