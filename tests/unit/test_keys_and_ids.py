"""Redis key layout (one slot per multi-key command) and time-sortable job ids."""

from __future__ import annotations

import time

from redis.crc import key_slot

from payloadstore_controlplane.logic.payload_keys import key_for, parse_key
from payloadstore_controlplane.models.domain import (
    JOB_ID_RE,
    PayloadKind,
    job_id_time_s,
    new_job_id,
)
from payloadstore_controlplane.store import keys


def test_keys_of_one_job_share_a_slot():
    job = new_job_id()
    slots = {
        key_slot(k.encode())
        for k in (keys.job(job), keys.done(job), keys.issue(job, "args"), keys.issue(job, "result"))
    }
    assert len(slots) == 1


def test_queues_of_one_namespace_share_a_slot_and_namespaces_spread():
    ns_slots = {key_slot(keys.queue("team", q).encode()) for q in ("a", "b", "gpu", "cpu.large")}
    ns_slots.add(key_slot(keys.idempotency("team", "k").encode()))
    ns_slots.add(key_slot(keys.queue_names("team").encode()))
    ns_slots.add(key_slot(keys.inline_index("team", int(time.time() * 1000)).encode()))
    assert len(ns_slots) == 1
    spread = {key_slot(keys.queue(f"team{i}", "a").encode()) for i in range(50)}
    assert len(spread) > 40


def test_job_ids_are_time_sortable_and_carry_their_time():
    ids = []
    for _ in range(5):
        ids.append(new_job_id())
        time.sleep(0.002)
    assert ids == sorted(ids)
    assert all(JOB_ID_RE.match(i) for i in ids)
    assert abs(job_id_time_s(ids[0]) - time.time()) < 5


def test_keys_are_minted_under_payloads_by_date_and_parse_back():
    job = new_job_id(int(time.mktime((2026, 3, 4, 12, 0, 0, 0, 0, 0)) * 1000))
    key = key_for(job, PayloadKind.RESULT)
    assert key.startswith("payloads/2026/03/04/") and key.endswith(f"/{job}/result")
    assert parse_key(key) == (job, PayloadKind.RESULT)


def test_parse_key_refuses_anything_we_could_not_have_minted():
    job = new_job_id()
    good = key_for(job, PayloadKind.ARGS)
    wrong_date = good.replace(good[9:19], "1999/01/01")
    for bad in (
        "",
        "exec/x",
        good + "x",
        good.replace("args", "other"),
        "/" + good,
        wrong_date,
        good.replace(job, job.lower()),
    ):
        assert parse_key(bad) is None, bad
