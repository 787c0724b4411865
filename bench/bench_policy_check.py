"""What a namespace policy adds to accepting a reference: the verifying HEAD alone (what every
reference cost before) against HEAD + GetObjectTagging (the retention tag's value: HEAD answers
only `x-amz-tagging-count`), and the whole policy check (`logic/policy.check_object_policy`),
against the local S3 emulator over HTTP, as the control plane calls it (S3Objects, warm,
kept-alive connections). Medians of N after a warm-up. On AWS the tagging read is one more
in-region round trip (not measurable here); what this shows is its CPU and the emulator's
answer time.

    .venv/bin/python bench/bench_policy_check.py [--n 300]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO)]

KEY = "payloads/2026/12/03/01KB7Z6Q3N4V8W2X5Y9Z0A1B2C/args"


def timed(fn, n: int) -> tuple[float, float]:
    """(median wall ms, median CPU ms) of fn, after a warm-up."""
    for _ in range(20):
        fn()
    wall, cpu = [], []
    for _ in range(n):
        w, c = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - w)
        cpu.append(time.process_time() - c)
    return statistics.median(wall) * 1e3, statistics.median(cpu) * 1e3


def collect(n: int) -> dict:
    import boto3

    from payloadstore_controlplane.logic.context import Deps
    from payloadstore_controlplane.logic.policy import check_object_policy
    from payloadstore_controlplane.models.policy import NamespacePolicy
    from payloadstore_controlplane.models.settings import Settings
    from payloadstore_controlplane.store.s3_objects import S3Objects
    from payloadstore_controlplane.store.sigv4 import invocation_running_as
    from payloadstore_devstack.s3_credentials import function_credentials
    from payloadstore_devstack.s3_kms import LOCAL_KMS_KEY_ARN
    from payloadstore_devstack.services import MotoServer, create_payload_bucket, local_aws_env

    server = MotoServer().start()
    try:
        os.environ.update(local_aws_env(server.endpoint))
        s3 = boto3.client("s3", endpoint_url=server.endpoint, region_name="us-east-1")
        bucket = "payloadstore-bench-policy"
        create_payload_bucket(s3, bucket)
        s3.put_object(
            Bucket=bucket,
            Key=KEY,
            Body=b"x" * 1024,
            Tagging="payloadstore-retention=7d",
            ServerSideEncryption="aws:kms",
            SSEKMSKeyId=LOCAL_KMS_KEY_ARN,
        )
        objects = S3Objects.for_region("us-east-1", server.endpoint, bucket, 900)
        settings = Settings(payload_bucket=bucket, kms_key_arn=LOCAL_KMS_KEY_ARN)
        deps = Deps(settings=settings, jobs=None, objects=objects, clock=time.time, queues=None)  # type: ignore[arg-type]
        policy = NamespacePolicy("7d", "stack", "allowed")
        with invocation_running_as(function_credentials("jobs")):
            head_ms = timed(lambda: objects.head(KEY), n)
            tags_ms = timed(lambda: objects.tags(KEY), n)
            info = objects.head(KEY)
            assert info is not None and info.tag_count == 1
            check_ms = timed(lambda: check_object_policy(KEY, info, policy, deps), n)
    finally:
        server.stop()
    return {
        "n": n,
        "head_wall_ms": round(head_ms[0], 3),
        "head_cpu_ms": round(head_ms[1], 3),
        "tagging_wall_ms": round(tags_ms[0], 3),
        "tagging_cpu_ms": round(tags_ms[1], 3),
        "policy_check_wall_ms": round(check_ms[0], 3),
        "policy_check_cpu_ms": round(check_ms[1], 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=300)
    figures = collect(parser.parse_args().n)
    print(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
