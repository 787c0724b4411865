"""Runs the control plane's scheduled functions (routes.SCHEDULES) on their timer, as the
deployed stack's EventBridge rules do: the local stack publishes queue metrics every minute too."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from typing import Any

log = logging.getLogger("payloadstore_devstack")


def scheduled_event(function: str, region: str) -> dict:
    """The event an EventBridge schedule rule sends (the shape of events/metrics_schedule.json)."""
    return {
        "version": "0",
        "id": str(uuid.uuid4()),
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": "000000000000",
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "region": region,
        "resources": [f"arn:aws:events:{region}:000000000000:rule/payloadstore-{function}"],
        "detail": {},
    }


class Scheduler:
    """One daemon thread; each schedule runs first after one period, then every period."""

    def __init__(self, region: str, *, period_scale: float = 1.0, schedules=None):
        from payloadstore_controlplane.routes import FUNCTIONS, SCHEDULES

        self.region = region
        self._functions = FUNCTIONS
        self._schedules = list(SCHEDULES if schedules is None else schedules)
        self._scale = period_scale
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.runs: dict[str, int] = {s.function: 0 for s in self._schedules}
        self.last_result: dict[str, Any] = {}

    def run_once(self, function: str) -> Any:
        from payloadstore_devstack.gateway_events import LocalLambdaContext, import_handler

        handler = import_handler(self._functions[function])
        context = LocalLambdaContext(
            function_name=f"payloadstore-{function}",
            aws_request_id=str(uuid.uuid4()),
            deadline=time.monotonic() + 30,
        )
        result = handler(scheduled_event(function, self.region), context)
        self.runs[function] = self.runs.get(function, 0) + 1
        self.last_result[function] = result
        return result

    def _loop(self) -> None:
        due = {
            s.function: time.monotonic() + s.every_minutes * 60 * self._scale
            for s in self._schedules
        }
        while not self._stop.is_set():
            now = time.monotonic()
            for s in self._schedules:
                if now >= due[s.function]:
                    due[s.function] = now + s.every_minutes * 60 * self._scale
                    try:
                        self.run_once(s.function)
                    except Exception as e:  # noqa: BLE001 - a failed run must not stop the timer
                        log.warning("scheduled function failed function=%s error=%s", s.function, e)
            self._stop.wait(
                min(max(d - time.monotonic(), 0.05) for d in due.values()) if due else 1
            )

    def start(self) -> Scheduler:
        if self._schedules:
            self._thread = threading.Thread(target=self._loop, name="schedules", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
