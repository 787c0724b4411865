"""The bucket's configuration as health checks it: reachable, its region, default encryption and
the lifecycle rules that expire payloads and each retention class."""

from __future__ import annotations

from botocore.exceptions import BotoCoreError, ClientError

from ._base import S3Base
from .errors import brief


class BucketChecks(S3Base):
    # -- health checks: each returns (ok, detail) and never raises -----------------------

    def check_reachable(self) -> tuple[bool, str]:
        try:
            self._s3.head_bucket(Bucket=self.bucket)
            return True, f"bucket {self.bucket} reachable"
        except (ClientError, BotoCoreError) as e:
            return False, f"bucket {self.bucket} not reachable: {brief(e)}"

    def check_region(self, expected_region: str) -> tuple[bool, str]:
        try:
            loc = self._s3.get_bucket_location(Bucket=self.bucket).get("LocationConstraint")
        except (ClientError, BotoCoreError) as e:
            return False, f"cannot read bucket region: {brief(e)}"
        region = loc or "us-east-1"  # S3 reports us-east-1 as an empty constraint
        if region != expected_region:
            return False, f"bucket is in {region}, control plane configured for {expected_region}"
        return True, f"bucket in {region}"

    def check_encryption(self) -> tuple[bool, str]:
        try:
            rules = self._s3.get_bucket_encryption(Bucket=self.bucket)[
                "ServerSideEncryptionConfiguration"
            ]["Rules"]
        except (ClientError, BotoCoreError) as e:
            return False, f"cannot read default encryption: {brief(e)}"
        algos = [r.get("ApplyServerSideEncryptionByDefault", {}).get("SSEAlgorithm") for r in rules]
        if "AES256" in algos:
            return True, "default encryption AES256 (SSE-S3)"
        return False, f"default encryption is {algos or 'none'}, expected AES256"

    def check_lifecycle(self, prefix: str, max_days: int) -> tuple[bool, str]:
        try:
            rules = self._s3.get_bucket_lifecycle_configuration(Bucket=self.bucket)["Rules"]
        except (ClientError, BotoCoreError) as e:
            return False, f"no lifecycle configuration: {brief(e)}"
        missing = retention_rules_missing(rules)
        if missing:
            return False, (
                "no enabled lifecycle rule (by the retention tag) for retention class "
                + ", ".join(missing)
            )
        for rule in rules:
            rule_prefix = rule.get("Filter", {}).get("Prefix", rule.get("Prefix"))
            days = rule.get("Expiration", {}).get("Days")
            if (
                rule.get("Status") == "Enabled"
                and rule_prefix == prefix
                and days
                and days <= max_days
            ):
                return True, (
                    f"lifecycle expires each retention class by its tag, and {prefix} after "
                    f"{days} days"
                )
        return False, f"no enabled lifecycle rule expiring {prefix} within {max_days} days"


def retention_rules_missing(rules: list[dict]) -> list[str]:
    """The retention classes (models/policy.py) without an enabled lifecycle rule expiring
    objects tagged with their class within its days."""
    from ...models.policy import RETENTION_DAYS, RETENTION_TAG

    found: dict[str, int] = {}
    for rule in rules:
        if rule.get("Status") != "Enabled":
            continue
        tag = rule.get("Filter", {}).get("Tag") or {}
        days = rule.get("Expiration", {}).get("Days")
        if tag.get("Key") == RETENTION_TAG and days:
            found[tag.get("Value", "")] = int(days)
    return [
        retention
        for retention, days in RETENTION_DAYS.items()
        if retention not in found or found[retention] > days
    ]
