"""Lambda's answer limit, enforced before AWS does: the byte budget of an answer that carries
deliveries (a poll with `max_jobs`, and the `next` deliveries of a result post or failure
report), in one place so every answer that hands out jobs counts them the same way.

What Lambda counts: a synchronous invocation's response payload is at most 6 MB (6,291,456 B),
and it is the whole API Gateway proxy answer, `{"statusCode": ..., "headers": ...,
"body": "<the JSON answer as a string>", ...}`. So each byte of our JSON answer counts once,
plus one for every `"` and `\\` escaped inside the body string. A non-ASCII character (error
text may hold any) is `\\uXXXX` in the body (Powertools writes ASCII JSON), so 7 bytes in the
proxy answer, 14 for one outside the BMP (a surrogate pair): `escaped_len` counts them so. An
inline payload is base64 in the answer: 4 bytes for every 3, no escapes. Over the limit, Lambda answers an error (API Gateway: 502) *after* the poll leased the jobs,
which then come back only after the visibility timeout.

How the budget is kept: a delivery is weighed by what it carries, never by a setting. The
first entry of an answer is taken whatever it weighs (one inline entry is bounded by the
largest INLINE_THRESHOLD the settings accept, `Settings`, so it always fits alone); every
later one only if its inline bytes fit what is left (`inline_room`, less DELIVERY_METADATA_MAX
for its other fields): the store looks at the entry before taking it (delivery_take.lua), so an
entry that would not fit is never taken (never leased, its attempts never counted, nothing left
pending) and waits for the next poll. This holds whatever INLINE_THRESHOLD was when the entry
was enqueued: a threshold lowered under queued jobs changes nothing. Each delivery taken is
then charged what it really weighs, escaped.
"""

from __future__ import annotations

import json
from typing import Any

# A synchronous invocation's response payload (6 MB) as Lambda counts it.
LAMBDA_RESPONSE_LIMIT = 6 * 1024 * 1024
# Left unused: the proxy envelope (status, headers, `{"jobs":[…]}`) needs well under 16 KiB;
# the rest is margin for what the worst-case figures below might miss.
ANSWER_HEADROOM = 1024 * 1024
# What the deliveries of one answer may weigh together.
DELIVERIES_BUDGET = LAMBDA_RESPONSE_LIMIT - ANSWER_HEADROOM
# One delivery's fields besides payloadInline at their largest, escaped: ids, lease, a
# reference with its presigned `download` URL, and up to MAX_BLOBS_PER_JOB (16) blob URLs; a URL
# signed with a Lambda role's session token is ~1.5-2 KiB, so 16 of them are ~32 KiB. Doubled.
DELIVERY_METADATA_MAX = 64 * 1024


def base64_len(size: int) -> int:
    """Characters of `size` bytes as padded base64."""
    return 4 * ((size + 2) // 3)


def largest_delivery(inline_threshold: int) -> int:
    """What the heaviest possible delivery weighs in an answer."""
    return base64_len(inline_threshold) + DELIVERY_METADATA_MAX


def largest_inline_threshold() -> int:
    """The largest INLINE_THRESHOLD whose largest delivery fits the budget alone."""
    return (DELIVERIES_BUDGET - DELIVERY_METADATA_MAX) // 4 * 3


def escaped_len(text: str) -> int:
    """The bytes JSON text (as pydantic writes it, UTF-8) takes once it is the body string of
    the proxy answer: json.dumps escapes `"`, `\\` and control characters and writes each
    non-ASCII character as one `\\uXXXX` (a surrogate pair: two), whose backslash the body
    string escapes once more (one byte each, counted here). DEL (0x7f) too: ASCII (so not counted
    with the others), yet pydantic writes it as it is and ASCII JSON as `\\u007f`."""
    size = len(json.dumps(text)) + text.count("\x7f")
    if not text.isascii():
        non_ascii = len(text) - len(text.encode("ascii", "ignore"))
        astral = len(text.encode("utf-16-le")) // 2 - len(text)
        size += non_ascii + astral
    return size


def delivery_bytes(delivery: Any) -> int:
    """What one delivery (a PollResponse), or any item of a list answer, adds to an answer,
    escaped as Lambda counts it: its metadata measured, its inline payload (base64, nothing to
    escape) counted."""
    inline = getattr(delivery, "payloadInline", None) or ""
    meta = delivery.model_dump_json(exclude={"payloadInline"})
    # The body string's escapes; +1 for the comma between deliveries.
    size = escaped_len(meta) + 1
    if inline:
        # ,"payloadInline":"…" inside the body string: 4 escaped quotes.
        size += len(',"payloadInline":""') + 4 + len(inline)
    return size


def inline_room(left: int) -> int:
    """The most inline bytes a delivery may carry and still fit `left` bytes (base64 in the
    answer, beside DELIVERY_METADATA_MAX of other fields); negative: not even an S3 one."""
    room = left - DELIVERY_METADATA_MAX
    return room // 4 * 3 if room >= 0 else -1


class AnswerBudget:
    """The bytes left for deliveries in one answer (see the module's docstring)."""

    def __init__(self, budget: int = DELIVERIES_BUDGET):
        self.left = budget
        self.used = 0

    def inline_room(self) -> int:
        """The most inline bytes the next delivery may carry (negative: none fits any more)."""
        return inline_room(self.left)

    def charge(self, delivery: Any) -> None:
        size = delivery_bytes(delivery)
        self.left -= size
        self.used += size
