"""The poll answer's byte budget (models/limits.py) counts what Lambda counts: the whole proxy
answer as the runtime serializes it, the JSON body escaped inside it."""

from __future__ import annotations

import base64
import json
import os

from payloadstore_controlplane.models.api import (
    BlobDownload,
    DownloadUrl,
    PayloadRef,
    PollManyResponse,
    PollResponse,
)
from payloadstore_controlplane.models.limits import (
    DELIVERIES_BUDGET,
    DELIVERY_METADATA_MAX,
    LAMBDA_RESPONSE_LIMIT,
    AnswerBudget,
    base64_len,
    delivery_bytes,
    largest_delivery,
)

# A presigned URL signed with a Lambda role's session token is ~1.5-2 KiB: take 2.5 KiB.
URL = "https://payloads.s3.eu-west-1.amazonaws.com/k?" + "X-Amz-Security-Token=" + "A" * 2400


def delivery(inline: bytes | None = None, blobs: int = 0, ref: bool = False) -> PollResponse:
    return PollResponse(
        job_id="01JD0000000000000000000000",
        namespace="n" * 63,
        queue="q" * 63,
        attempt=3,
        lease="L" * 16,
        lease_expires_at=1_900_000_000.123,
        lease_expires_in_s=300.0,
        payloadInline=base64.b64encode(inline).decode() if inline is not None else None,
        payloadRef=(
            PayloadRef(
                kind="s3",
                bucket="b" * 63,
                key="payloads/2026/12/03/01JD0000000000000000000000/args",
                size=10**12,
                contentType="application/msgpack",
                sha256="a" * 64,
            )
            if ref
            else None
        ),
        download=DownloadUrl(url=URL, expires_at="2026-12-03T14:00:00Z") if ref else None,
        blobs=[
            BlobDownload(sha256="b" * 64, url=URL, expires_at="2026-12-03T14:00:00Z")
            for _ in range(blobs)
        ]
        or None,
    )


def proxy_bytes(deliveries: list[PollResponse]) -> int:
    """The proxy answer as Lambda's Python runtime serializes it (json.dumps)."""
    body = PollManyResponse(jobs=deliveries).model_dump_json()
    out = {
        "statusCode": 200,
        "headers": {"Content-Type": "application/json"},
        "multiValueHeaders": {},
        "body": body,
        "isBase64Encoded": False,
    }
    return len(json.dumps(out))


def test_what_a_delivery_is_charged_is_what_it_adds_to_the_answer():
    # Given deliveries of each shape: inline, S3 with its download URL, inline with 16 blobs
    shapes = [delivery(os.urandom(390 * 1024)), delivery(ref=True), delivery(b"x", blobs=16)]
    for one in shapes:
        # When two of them are answered, against none
        added = proxy_bytes([one, one]) - proxy_bytes([])
        charged = 2 * delivery_bytes(one)
        # Then the charge covers what each really adds, and is not far above it
        assert added <= charged <= added + 8, (added, charged)


def test_the_largest_delivery_there_can_be_is_within_its_figure():
    # Given a delivery with everything at its largest but the payload: 16 blob URLs and a
    # download URL, each 2.5 KiB
    heaviest = delivery(b"", blobs=16, ref=True)
    # Then its metadata is within DELIVERY_METADATA_MAX, and with an inline payload at the
    # threshold, within largest_delivery()
    assert delivery_bytes(heaviest) <= DELIVERY_METADATA_MAX
    full = delivery(os.urandom(256 * 1024), blobs=16, ref=True)
    assert delivery_bytes(full) <= largest_delivery(256 * 1024)
    assert base64_len(256 * 1024) == len(full.payloadInline or "")


def test_a_budget_never_lets_an_answer_pass_the_limit():
    # Given a poll filling its budget with 390 KiB jobs, each taken only if it fits the room
    budget = AnswerBudget()
    taken = []
    one = delivery(os.urandom(390 * 1024))
    while len(taken) < 16 and (not taken or 390 * 1024 <= budget.inline_room()):
        taken.append(one)
        budget.charge(one)
    # Then it stopped before 16, the answer is under 6 MB, and the budget is the figure
    assert 1 < len(taken) < 16
    assert proxy_bytes(taken) <= DELIVERIES_BUDGET < LAMBDA_RESPONSE_LIMIT


def test_error_text_of_any_characters_is_charged_what_the_proxy_answer_holds():
    # Given a job status whose error holds ASCII, quotes, newlines, accents and emoji (error
    # text is the user's: any character)
    from payloadstore_controlplane.models.api import JobError, JobStatusResponse

    text = 'plain "quoted" back\\slash\nnew line é ü 中文 😀🚀 ' * 50
    status = JobStatusResponse(
        job_id="01JD0000000000000000000000",
        queue="q",
        state="failed",
        attempts=1,
        tier="inline",
        error=JobError(type="ValueError", message=text, traceback=text),
    )
    # When Powertools writes the body (ASCII JSON: \uXXXX escapes) and the runtime the proxy
    # answer around it
    meta = status.model_dump_json()
    body = json.dumps(json.loads(meta), separators=(",", ":"))
    # Then the charge is exactly what the body string takes in the proxy answer
    from payloadstore_controlplane.models.limits import escaped_len

    assert escaped_len(meta) == len(json.dumps(body))
    assert delivery_bytes(status) == len(json.dumps(body)) + 1


def test_error_text_of_every_ascii_and_escaped_character_is_charged_what_the_answer_holds():
    # Given a job status whose error holds every character from NUL to DEL (DEL, 0x7f, is
    # ASCII, yet JSON written as ASCII escapes it as \u007f: 7 bytes in the proxy answer) and
    # the line separators JSON escapes too
    from payloadstore_controlplane.models.api import JobError, JobStatusResponse
    from payloadstore_controlplane.models.limits import escaped_len

    text = ("".join(chr(c) for c in range(128)) + "\u2028\u2029\x80\xff") * 200
    status = JobStatusResponse(
        job_id="01JD0000000000000000000000",
        queue="q",
        state="failed",
        attempts=1,
        tier="inline",
        error=JobError(type="ValueError", message=text, traceback=text),
    )
    # When Powertools writes the body and the runtime the proxy answer around it
    meta = status.model_dump_json()
    body = json.dumps(json.loads(meta), separators=(",", ":"))
    # Then the charge is exactly what the body string takes in the proxy answer
    assert escaped_len(meta) == len(json.dumps(body))
    assert delivery_bytes(status) == len(json.dumps(body)) + 1


def test_a_page_of_the_queue_listing_at_its_heaviest_fits_the_budget():
    # Given the heaviest queue figures there can be: a 63-character name, 20-digit counts
    from payloadstore_controlplane.logic.queues import QUEUE_LIST_PAGE
    from payloadstore_controlplane.models.api import QueueStats

    heaviest = QueueStats(
        name="q" * 63,
        queued=10**19,
        in_flight=10**19,
        oldest_queued_age_s=1e19 + 0.123,
        failed=10**19,
    )
    # Then a full page of them stays within the answer's budget
    assert QUEUE_LIST_PAGE * delivery_bytes(heaviest) <= DELIVERIES_BUDGET
