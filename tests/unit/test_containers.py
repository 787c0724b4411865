"""The local gateway's containers: one invocation per module instance at a time, like Lambda."""

from __future__ import annotations

import sys
import threading
import time

from payloadstore_devstack.containers import HandlerPool

MODULE = """
import threading
state = {"current": None}
release = threading.Event()

def handler(event, context):
    state["current"] = event["id"]          # module state, like a resolver's current_event
    if event.get("block"):
        release.wait(5)
    return {"module": __name__, "saw": state["current"]}
"""


def test_concurrent_invocations_get_private_module_state(tmp_path, monkeypatch):
    (tmp_path / "blocking_handler.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    pool = HandlerPool("blocking_handler.handler")
    results = {}
    # Given an invocation parked inside the handler
    slow = threading.Thread(
        target=lambda: results.update(slow=pool({"id": "A", "block": True}, None))
    )
    slow.start()
    time.sleep(0.2)
    # When another invocation of the same function runs meanwhile
    results["fast"] = pool({"id": "B"}, None)
    sys.modules["blocking_handler"].release.set()
    slow.join()
    # Then each saw only its own event, in a container of its own
    assert results["slow"]["saw"] == "A" and results["fast"]["saw"] == "B"
    assert results["slow"]["module"] != results["fast"]["module"]
    assert pool.containers == 2
    # And an idle container is reused rather than a third one started
    pool({"id": "C"}, None)
    assert pool.containers == 2
