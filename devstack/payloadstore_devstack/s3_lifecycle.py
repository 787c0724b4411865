"""The bucket's lifecycle Expiration rules, applied by the emulator as S3 applies them (moto
stores the rules and never acts on them)."""

from __future__ import annotations

import os
import threading
from datetime import UTC

from payloadstore_devstack.s3_wsgi import copy_source, stored_object

# Seconds in a lifecycle day: 86,400 as on S3; a test makes days seconds long to watch the rules
# act (e.g. PAYLOADSTORE_S3_DAY_S=4: an object of a 1-day rule is gone 4 to 8 s after its write).
DAY_ENV = "PAYLOADSTORE_S3_DAY_S"


def day_seconds(environ: dict[str, str] | None = None) -> float:
    env = os.environ if environ is None else environ
    raw = env.get(DAY_ENV) or ""
    try:
        value = float(raw) if raw else 86_400.0
    except ValueError:
        value = 86_400.0
    return value if value > 0 else 86_400.0


class LifecycleExpiry:
    """The bucket's lifecycle Expiration rules, applied as S3 applies them (moto stores the rules
    and never acts on them): an object under a rule's prefix is deleted once `Days` days have
    passed since its last write, S3 rounding the time up to the next midnight UTC. S3 deletes in
    the background, some time after that; here the object is gone at that moment for every
    request that touches it (GET, HEAD, a copy's source, a listing of the bucket), and a sweep
    removes the rest every so often, so tests can rely on both sides of the instant.

    A "day" is PAYLOADSTORE_S3_DAY_S seconds (86,400 by default), and midnight a multiple of it
    since the epoch: a test with days of a few seconds watches objects expire, and a copy of an
    object onto itself (a renewal) move its expiry."""

    def __init__(self, app, day_s: float | None = None, clock=None, sweep_every_s=None):
        import time as _time

        self.app = app
        self.day_s = day_s if day_s is not None else day_seconds()
        self.clock = clock or _time.time
        self.sweep_every_s = (
            sweep_every_s if sweep_every_s is not None else min(60.0, self.day_s / 8)
        )
        self.expired = 0  # objects this emulator deleted by a rule
        self._lock = threading.Lock()

    def start_sweeping(self) -> LifecycleExpiry:
        def loop() -> None:
            import time as _time

            while True:
                _time.sleep(self.sweep_every_s)
                try:
                    self.sweep()
                except Exception:  # noqa: BLE001, S112 - a sweep races moto's own requests; the next one retries
                    continue

        threading.Thread(target=loop, name="lifecycle-sweep", daemon=True).start()
        return self

    def __call__(self, environ, start_response):
        bucket, _, key = environ.get("PATH_INFO", "").lstrip("/").partition("/")
        if bucket and key:
            self.expire(bucket, key)
        elif bucket and environ.get("REQUEST_METHOD") == "GET":
            self.sweep(bucket)
        source = copy_source(environ.get("HTTP_X_AMZ_COPY_SOURCE", ""))
        if source is not None:
            self.expire(*source)
        return self.app(environ, start_response)

    def expiry(self, written: float, days: float) -> float:
        """When a rule of `days` deletes an object written at `written` (epoch seconds)."""
        import math

        return math.ceil((written + days * self.day_s) / self.day_s) * self.day_s

    def _rules(self, bucket_name: str) -> list[tuple[str, dict[str, str], float]]:
        """(prefix, tags that must match, days) of each enabled Expiration rule."""
        from moto.s3.models import s3_backends

        partition, account = s3_backends.bucket_accounts[bucket_name]
        bucket = s3_backends[account][partition].buckets[bucket_name]
        found = []
        for rule in getattr(bucket, "rules", ()):
            if (rule.status or "").lower() != "enabled" or not rule.expiration_days:
                continue
            prefix, tags = rule.prefix, {}
            f = rule.filter
            if f is not None:
                if f.prefix is not None:
                    prefix = f.prefix
                if f.tag_key:
                    tags[f.tag_key] = f.tag_value or ""
                if f.and_filter is not None:
                    prefix = f.and_filter.prefix or prefix
                    tags.update(f.and_filter.tags or {})
            found.append((prefix or "", tags, float(rule.expiration_days)))
        return found

    def _backend(self, bucket_name: str):
        from moto.s3.models import s3_backends

        partition, account = s3_backends.bucket_accounts[bucket_name]
        return s3_backends[account][partition]

    def _tags(self, bucket_name: str, stored) -> dict[str, str]:
        try:
            raw = self._backend(bucket_name).get_object_tagging(stored)
        except Exception:  # noqa: BLE001 - no tags to tell
            return {}
        return {t["Key"]: t["Value"] for t in raw.get("Tags", [])}

    def expire(self, bucket_name: str, key: str) -> bool:
        """Delete the object if a rule has expired it (S3 honours the shortest of the rules that
        match its key and tags); whether it did."""
        try:
            rules = [
                (tags, days)
                for prefix, tags, days in self._rules(bucket_name)
                if key.startswith(prefix)
            ]
        except Exception:  # noqa: BLE001 - no such bucket: moto answers for itself
            return False
        if not rules:
            return False
        stored = stored_object(bucket_name, key)
        if stored is None:
            return False
        own = self._tags(bucket_name, stored) if any(tags for tags, _ in rules) else {}
        days = [d for tags, d in rules if all(own.get(k) == v for k, v in tags.items())]
        if not days:
            return False
        written = stored.last_modified.replace(tzinfo=UTC).timestamp()
        if self.clock() < self.expiry(written, min(days)):
            return False
        with self._lock:
            if stored_object(bucket_name, key) is not stored:
                return False  # written again meanwhile
            self._backend(bucket_name).delete_object(bucket_name, key)
            self.expired += 1
        return True

    def sweep(self, bucket_name: str | None = None) -> int:
        """Apply the rules to every object (of one bucket, or of all): how many were deleted."""
        from moto.s3.models import s3_backends

        names = [bucket_name] if bucket_name else list(s3_backends.bucket_accounts.keys())
        deleted = 0
        for name in names:
            try:
                if not self._rules(name):
                    continue
                keys = list(self._backend(name).buckets[name].keys.keys())
            except Exception:  # noqa: BLE001, S112 - a bucket deleted meanwhile
                continue
            for key in keys:
                deleted += self.expire(name, key)
        return deleted
