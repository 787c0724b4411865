"""S3, the only code calling it: one module per thing a reader looks for, composed into
`store/s3_objects.S3Objects` (as `store/jobs/` is into `RedisJobStore`).

- `client.py`: botocore's S3 client, created on first use, once per container.
- `signer.py`: SigV4 signing in-process (presigned URLs; the HEAD and GetObjectTagging signed
  in the Authorization header).
- `connections.py`: kept-alive connections the signed HEAD and GetObjectTagging go over.
- `errors.py`: the one mapping of S3 and botocore failures to the control plane's errors.
- `_base.py`: what every part of `S3Objects` shares (the client, bucket, presigner, URL lifetime).
- `presigning.py`: presigned PUT and GET URLs of whole objects.
- `multipart.py`: multipart uploads (create, part URLs, list parts, complete, abort).
- `objects.py`: one object's HEAD, tags, small reads and writes, and deletes.
- `copies.py`: copies of an object onto itself (renewals), whole or in parts.
- `bucket.py`: the bucket's configuration, checked by health.
"""
