"""An S3 emulator of a test's own, over HTTP, whose lifecycle days are scaled down (the
emulator's DAY_ENV), with the payload bucket created as the stack creates it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


@contextmanager
def scaled_days_emulator(logs: Path, day_s: float, bucket: str) -> Iterator[tuple[Any, Any]]:
    """(the emulator, a boto3 S3 client of it); a lifecycle day lasts `day_s` seconds."""
    import boto3
    from botocore.config import Config

    from payloadstore_devstack.s3_lifecycle import DAY_ENV
    from payloadstore_devstack.services import (
        LOCAL_ACCESS_KEY_ID,
        LOCAL_SECRET_ACCESS_KEY,
        MotoServer,
        create_payload_bucket,
    )

    emulator = MotoServer(log_path=logs / "s3.log", env={DAY_ENV: str(day_s)}).start()
    try:
        s3 = boto3.client(
            "s3",
            endpoint_url=emulator.endpoint,
            region_name="us-east-1",
            aws_access_key_id=LOCAL_ACCESS_KEY_ID,
            aws_secret_access_key=LOCAL_SECRET_ACCESS_KEY,
            config=Config(signature_version="s3v4"),
        )
        create_payload_bucket(s3, bucket)
        yield emulator, s3
    finally:
        emulator.stop()
