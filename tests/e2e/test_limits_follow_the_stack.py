"""Limits that follow the stack (issue 44): a daemon and the clients started under one
MAX_PAYLOAD_BYTES keep working when the stack restarts with another. Before, each read
`/v1/config` once: after `make dev` was restarted with the cap raised, a 200 MiB job was
accepted, ran, and failed `PayloadTooLarge: result is 209715264 bytes encoded, over the
104857600 byte cap`. Here the same, with a 1 MiB cap raised to 8 MiB and 3 MiB values."""

from __future__ import annotations

import asyncio

import pytest

from payloadstore import AsyncClient
from tests.e2e.conftest import _start
from tests.e2e.sdk_helpers import clients, daemon_thread, unique_queue

pytestmark = pytest.mark.e2e

MIB = 1 << 20
OLD_CAP, NEW_CAP, SIZE = 1 * MIB, 8 * MIB, 3 * MIB


def test_given_a_daemon_and_clients_that_lived_through_a_restart_with_a_raised_cap_then_values_above_the_old_cap_go_through(
    _gateway_services,
):
    # Given: a stack with MAX_PAYLOAD_BYTES = 1 MiB, a daemon and a client that read it
    old, info = _start(_gateway_services, "cap-old", {"MAX_PAYLOAD_BYTES": str(OLD_CAP)})
    new = None
    loop = asyncio.new_event_loop()
    try:
        client, daemon_client = clients(info)
        queue = unique_queue("cap")
        with daemon_thread(daemon_client, queue, lambda n: bytes(n)):
            assert client.queue(queue).call(16, timeout=30) == bytes(16)
            assert daemon_client.config.max_payload_bytes == OLD_CAP
            assert client.config.max_payload_bytes == OLD_CAP

            async def async_reads() -> AsyncClient:
                aclient = AsyncClient(info.url, info.token("dev", "client"), "dev")
                assert (await aclient.config()).max_payload_bytes == OLD_CAP
                return aclient

            aclient = loop.run_until_complete(async_reads())
            # When: the stack restarts, on the same endpoint, with the cap raised to 8 MiB
            old.stop()
            new, _ = _start(
                _gateway_services,
                "cap-new",
                {"MAX_PAYLOAD_BYTES": str(NEW_CAP)},
                port=old.port,
            )
            # Then: the client sends 3 MiB of arguments, sync and async
            sent = client.queue(queue + "-sync").add(bytes(SIZE))
            assert sent.status().state == "queued"

            async def async_send() -> str:
                try:
                    job = await aclient.queue(queue + "-async").add(bytes(SIZE))
                    return (await job.status()).state
                finally:
                    await aclient.aclose()

            assert loop.run_until_complete(async_send()) == "queued"
            # And: a job whose result is 3 MiB succeeds (the daemon does not refuse it on the
            # cap it read at its start)
            assert client.queue(queue).call(SIZE, timeout=60) == bytes(SIZE)
    finally:
        loop.close()
        old.stop()
        if new is not None:
            new.stop()
