"""`built_once`: a per-process cache whose values are built once under concurrency."""

from __future__ import annotations

import threading
import time

from payloadstore_controlplane.runtime.once import built_once


def test_concurrent_first_calls_build_the_value_once():
    # Given a slow builder (as creating a botocore client is) behind built_once
    builds = []

    @built_once(maxsize=4)
    def client(region: str) -> object:
        builds.append(region)
        time.sleep(0.05)
        return object()

    got = []
    start = threading.Barrier(16)

    def ask():
        start.wait()
        got.append(client("eu-west-1"))

    # When 16 threads ask for it at the same moment
    threads = [threading.Thread(target=ask) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # Then it was built once and everyone got that one instance
    assert builds == ["eu-west-1"]
    assert len({id(c) for c in got}) == 1
    # And other arguments get their own value, and cache_clear forgets them, as lru_cache does
    assert client("us-east-1") is not got[0]
    client.cache_clear()
    assert client("eu-west-1") is not got[0]
    assert builds == ["eu-west-1", "us-east-1", "eu-west-1"]
