"""Every job-hash field a Lua script of the store reads or writes is in keys.py's legend, so the
legend a reviewer reads beside a script is the whole truth about the job hash."""

from __future__ import annotations

import re

from payloadstore_controlplane.store import jobs, keys

# Job-hash commands the scripts use, with the field names they name ('n', 'lt', …); the first
# argument is the key (KEYS[1] is the job hash in every job-slot script).
_HASH_CALL = re.compile(
    r"redis\.call\('(HSET|HGET|HMGET|HDEL|HEXISTS|HINCRBY)',\s*KEYS\[1\],([^)]*)\)"
)
_QUOTED = re.compile(r"'([a-z]{1,2})'")
# The job slot's scripts (KEYS[1] is the job hash); the others are on the namespace slot.
JOB_SLOT = {
    "presign_args",
    "presign_result",
    "presign_count",
    "enqueue_settle_ref",
    "enqueue_refuse_ref",
    "enqueue_record_entry",
    "delivery_start",
    "completion_complete",
    "completion_payload_lost",
    "lifecycle_heartbeat",
    "lifecycle_cancel",
    "operate_retry",
    "operate_purge",
    "requeue_record",
}


def legend_fields() -> set[str]:
    legend = keys.__doc__ or ""
    return set(re.findall(r"(?:^|\s)`?([a-z]{1,2})`?\s{2,}", legend)) | set(
        re.findall(r"`([a-z]{1,2})`", legend)
    )


def _arguments(text: str) -> list[str]:
    """A call's arguments, split at the commas outside parentheses."""
    out, depth, current = [], 0, ""
    for ch in text:
        depth += (ch == "(") - (ch == ")")
        if ch == "," and depth == 0:
            out.append(current.strip())
            current = ""
        else:
            current += ch
    return [a for a in [*out, current.strip()] if a]


def fields_used(name: str) -> set[str]:
    """Field names the script passes to hash commands on the job hash (for HSET only the field
    positions: its values may be quoted letters too)."""
    found: set[str] = set()
    for command, args in _HASH_CALL.findall(jobs.source(name)):
        names = _arguments(args)
        if command == "HSET":
            names = names[::2]
        elif command == "HINCRBY":
            names = names[:1]
        for arg in names:
            found |= set(_QUOTED.findall(arg)) if _QUOTED.fullmatch(arg) else set()
    return found


def test_every_job_slot_script_is_known():
    assert JOB_SLOT <= set(jobs.names())


def test_every_hash_field_a_script_uses_is_in_the_legend():
    legend = legend_fields()
    missing = {
        name: sorted(fields_used(name) - legend) for name in sorted(JOB_SLOT) if fields_used(name)
    }
    assert all(fields_used(name) for name in JOB_SLOT - {"presign_args", "presign_count"})
    assert {name: m for name, m in missing.items() if m} == {}


def test_the_check_sees_a_field_missing_from_the_legend():
    # The parse finds fields (a check that finds nothing would pass for any legend)
    used = fields_used("delivery_start")
    assert {"s", "x", "lt", "lx", "d", "a", "cr"} <= used
