"""moto's S3/SSM server, as strict about presigned URLs as S3 is.

moto checks no signature at all: it accepts a presigned URL whose key, signed headers or
`X-Amz-Expires` were edited, one past its expiry, a request with no signature, and stores a body
whose sha256 differs from the signed `x-amz-checksum-sha256`. Real S3 refuses each. Clients of
the local stack (the SDK's uploads and re-presign on expiry, the CP's checksum checks) must meet
S3's answers here, or the local stack could not show a signing bug. This WSGI middleware, in
front of moto, answers like S3:

- a presigned request (`X-Amz-Signature` in the query) is verified by recomputing its SigV4
  query signature with botocore's own signer over the request as received (method, path as sent,
  query without the signature, the signed headers' values, host): a mismatch is 403
  `SignatureDoesNotMatch`, an access key the emulator does not know 403 `InvalidAccessKeyId`,
  incomplete auth parameters 400 `AuthorizationQueryParametersError`;
- past `X-Amz-Date + X-Amz-Expires`: 403 `AccessDenied` "Request has expired";
- no signature at all (no `Authorization` header, no `X-Amz-Signature`): 403 `AccessDenied`
  (the bucket blocks public access, as the deployed one does);
- a PUT body whose sha256 or CRC64NVME differs from the checksum it carries: 400 `BadDigest`
  (checked for header-signed PUTs too; the checksum is kept for HEAD, as S3 keeps it).

It also enforces the template's S3 grants (payloadstore_controlplane/grants.py, the table the
CDK roles are written from). Each function signs with local keys of its own
(`function_credentials(group)`: the local gateway and the integration tests run each invocation
under them), and a request signed with a function's key, in the `Authorization` header or as the
signer of a presigned URL, may do what that function's role may do:

- an action the function lacks (PutObject by `jobs`, any object outside `payloads/`, ...) is 403
  `AccessDenied`;
- a GET or HEAD of a missing key is 403 `AccessDenied`, not 404, when the function lacks
  s3:ListBucket on the bucket, as S3 answers.

- an upload that signs an x-amz-tagging header (a namespace policy's retention tag) needs
  s3:PutObjectTagging as well, as S3 judges PutObject with tags;
- KMS, by the key grants of grants.py (`KMS_ACTIONS`, on the keys listed in
  PAYLOADSTORE_KMS_KEYS, default the local stack's key `LOCAL_KMS_KEY_ARN`): an SSE-KMS upload
  (PutObject, CreateMultipartUpload, CopyObject, and UploadPart/CompleteMultipartUpload of such
  an upload) signed by a function without kms:GenerateDataKey on the key, or a GET of an
  SSE-KMS object signed by one without kms:Decrypt, is 403 AccessDenied, as S3 answers when
  the signer's role may not use the key. A key outside `payloads/` and `blobs/` is refused too
  (the key policy's encryption-context condition).

Any other key (`local`, the operator's: the stack's setup, the tests' own checks) is not limited.
PAYLOADSTORE_S3_GRANTS (grants.table_to_json) replaces the table, for tests that show what a
missing grant does. Only path-style S3 requests are judged (the local stack's); every bucket
stands for the payload bucket.

Multipart uploads follow S3's checksum rules, which moto leaves out (`MultipartChecksums`, behind
the checks above):

- an UploadPart whose body's sha256 differs from its `x-amz-checksum-sha256` is 400 `BadDigest`
  (presigned or header-signed); a part without one, to an upload created with
  `ChecksumAlgorithm=SHA256`, is 400 `InvalidRequest` (checksum type mismatch);
- ListParts answers each part's `ChecksumSHA256`;
- CompleteMultipartUpload of a SHA256 upload must name each part's checksum as it was uploaded:
  a missing or different one is 400 `InvalidPart`; its answer carries the object's composite
  `ChecksumSHA256` ("<base64 of sha256 of the parts' binary sha256s>-<part count>"), which
  HeadObject with checksum mode answers too (moto computes that one);
- CRC64NVME uploads are FULL_OBJECT (COMPOSITE with CRC64NVME, or FULL_OBJECT with SHA256, is
  400 `InvalidRequest` at CreateMultipartUpload, as S3 answers); a part may carry its CRC (400
  `BadDigest` when it differs) or none; CompleteMultipartUpload's `x-amz-checksum-crc64nvme` is
  checked against the parts' CRCs combined (400 `BadDigest`: a part swapped for other bytes of
  the same length is caught), and HeadObject answers the whole object's CRC, FULL_OBJECT;
- a completion moto takes longer than a second to assemble answers as S3 does: 200 at once, a
  space every second to keep the connection alive, then the result (or an `<Error>`, which
  botocore reads as the error); requests on that key or upload wait until the object is stored,
  as S3's completion is atomic (moto drops the upload before it stores the object).

A ranged GET (`Range: bytes=a-b`) of an object is answered from moto's stored bytes at that
offset: moto itself reads the whole object for every range, which made a parallel ranged
download of 1 GiB cost ~64 GiB of copying.

UploadPartCopy into an upload created with `ChecksumAlgorithm=SHA256` answers the copied range's
`ChecksumSHA256` in its CopyPartResult, as S3 does, and the completion takes it.

The bucket's lifecycle Expiration rules are applied (`LifecycleExpiry`: moto stores rules and
never acts on them): an object is gone once its rule's days have passed since its last write,
rounded up to the next midnight, and PAYLOADSTORE_S3_DAY_S makes a day that many seconds, so a
test can watch a blob expire, or outlive the jobs that reference it through its renewals.

Requests signed in the `Authorization` header otherwise go to moto as they are (their signature
is not checked). The log line of each request carries its path only: query strings (signatures,
credentials) never reach the log.

Where each rule lives (this module puts the layers together in front of moto and serves them):

- s3_sigv4: the presigned-URL and unsigned-request checks (`PresignedUrlRules`, the outer layer
  behind the lifecycle);
- s3_credentials: the operator's and each function's local keys;
- s3_grants: the functions' S3 grants (`as_granted`, `s3_action`);
- s3_kms: the KMS key grants;
- s3_checksums: a PUT's body against its checksum, and moto's completion reading each part once;
- s3_multipart: the multipart rules, the completion kept alive, ranged GETs (`MultipartChecksums`);
- s3_lifecycle: the Expiration rules (`LifecycleExpiry`);
- s3_wsgi: the WSGI pieces they share (S3's XML errors, captured answers, moto's stored objects).

Run: python -m payloadstore_devstack.s3_emulator -H 127.0.0.1 -p 5000
"""

from __future__ import annotations

import argparse
import os
import re

from payloadstore_devstack.s3_lifecycle import LifecycleExpiry
from payloadstore_devstack.s3_multipart import MultipartChecksums
from payloadstore_devstack.s3_sigv4 import PresignedUrlRules

_QUERY = re.compile(r"\?[^\s\"']*")


def redact(text: str) -> str:
    """Request targets without their query strings (signatures, credentials)."""
    return _QUERY.sub("?<redacted>", text)


def _request_handler():
    from werkzeug.serving import WSGIRequestHandler

    class RedactingRequestHandler(WSGIRequestHandler):
        def log(self, type: str, message: str, *args) -> None:
            super().log(type, "%s", redact(message % args if args else message))

    return RedactingRequestHandler


def _dispatcher():
    """moto's application for every service, with the host-to-backend lookup remembered.

    moto resolves the backend of a request's host on every request by listing its own package
    directory (~180 `stat` calls) and trying each service's URL patterns, 1-2 ms of CPU per
    request; the answer depends on the host alone (`s3.us-east-1.amazonaws.com`, ...), so it is
    kept. Nothing else of moto's dispatch changes."""
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

    class RememberingDispatcher(DomainDispatcherApplication):
        # A service and region per entry: a few in practice; a bound all the same.
        MAX_HOSTS = 256

        def __init__(self, create_app):
            super().__init__(create_app)
            self._backend_of: dict = {}

        def get_backend_for_host(self, host):  # called under the dispatcher's lock
            try:
                return self._backend_of[host]
            except KeyError:
                backend = super().get_backend_for_host(host)
                if len(self._backend_of) < self.MAX_HOSTS:
                    self._backend_of[host] = backend
                return backend

    return RememberingDispatcher(create_backend_app)


def main(argv: list[str] | None = None) -> None:
    from werkzeug.serving import run_simple

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-H", "--host", default="127.0.0.1")
    parser.add_argument("-p", "--port", type=int, default=5000)
    args = parser.parse_args(argv)
    os.environ.setdefault("MOTO_PORT", str(args.port))
    # Outermost: an expired object is gone for every layer (the ranged GETs read moto directly).
    app = LifecycleExpiry(PresignedUrlRules(MultipartChecksums(_dispatcher()))).start_sweeping()
    run_simple(args.host, args.port, app, threaded=True, request_handler=_request_handler())


if __name__ == "__main__":
    main()
