"""S3: presigned URLs (PUT, UploadPart, GET), HEAD checks, multipart uploads (create, list
parts, complete, abort), CopyObject and the bucket's configuration. With `store/s3/`, the only
code calling S3.

`S3Objects` is one object made of one module per thing a reader looks for (`store/s3/`):
presigning, multipart uploads, one object's reads and writes, copies onto itself (renewals) and
the bucket's checks; the signer, the kept-alive connections of the signed HEAD, the client and
the error mapping sit beside them. Presigned URLs and the verifying HEAD are signed in-process
(`s3/signer.py`); the botocore client is created on first use, once per container.
"""

from __future__ import annotations

from .s3.bucket import BucketChecks
from .s3.client import LazyS3Client
from .s3.copies import Copies
from .s3.multipart import Multipart
from .s3.objects import ObjectAccess
from .s3.presigning import Presigning
from .s3.signer import SigV4Presigner


class S3Objects(Presigning, Copies, Multipart, ObjectAccess, BucketChecks):
    @classmethod
    def for_region(
        cls, region: str, endpoint_url: str | None, bucket: str, presign_ttl_s: int
    ) -> S3Objects:
        """What a function uses: local signing, and a client created on its first S3 call."""
        return cls(
            LazyS3Client(region, endpoint_url),
            bucket,
            presign_ttl_s,
            SigV4Presigner(region, endpoint_url),
        )
