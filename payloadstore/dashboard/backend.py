"""What the dashboard asks of the control plane, through the SDK's client and its token.

Each method answers plain JSON-ready dicts (the control plane's own fields, as the wire has
them), so the page shows what `payloadstore status` would print. Presigned URLs never reach the
browser: they are dropped from every answer (a GET URL is a credential for its object).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from .. import _wire
from ..client import Client
from ..errors import ConflictError, InvalidRequest, JobNotFound, QueueNotFound


class Backend(Protocol):
    """The dashboard server's view of the control plane (a fake one in unit tests)."""

    namespace: str
    endpoint: str

    def queues(self) -> list[dict[str, Any]]: ...
    def jobs(self, queue: str, state: str, limit: int, cursor: str | None) -> dict[str, Any]: ...
    def job(self, job_id: str) -> dict[str, Any]: ...
    def cancel(self, job_id: str) -> dict[str, Any]: ...
    def retry(self, job_id: str) -> dict[str, Any]: ...
    def redrive(self, queue: str, states: Sequence[str] | None, limit: int | None) -> dict: ...
    def purge(self, queue: str) -> dict[str, Any]: ...


# Keys of an answer that hold presigned URLs: a bearer credential for one object each.
URL_KEYS = frozenset({"download", "upload", "url"})


def without_urls(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: without_urls(v) for k, v in value.items() if k not in URL_KEYS}
    if isinstance(value, list):
        return [without_urls(v) for v in value]
    return value


def _raw(response: Any) -> dict[str, Any]:
    return _wire._json(response)


def _queue_errors() -> dict[str | int, _wire.ErrorFactory]:
    return {"not_found": QueueNotFound, 404: QueueNotFound}


def _job_errors() -> dict[str | int, _wire.ErrorFactory]:
    return {"not_found": JobNotFound, 404: JobNotFound, "not_retryable": ConflictError}


class ClientBackend:
    """The control plane of one namespace, through `payloadstore.Client` (its token stays here)."""

    def __init__(self, client: Client):
        self.client = client
        self.namespace = client.namespace
        self.endpoint = client.wire.endpoint

    @staticmethod
    def secrets(client: Client) -> tuple[str, ...]:
        """What must never reach the browser, even quoted in an error message: the token."""
        return (client.wire._token,)

    def _send(self, call: _wire.Call[dict[str, Any]]) -> dict[str, Any]:
        return without_urls(self.client.wire.send(call))

    def queues(self) -> list[dict[str, Any]]:
        return [
            {
                "name": q.name,
                "queued": q.queued,
                "in_flight": q.in_flight,
                "oldest_queued_age_s": q.oldest_queued_age_s,
            }
            for q in self.client.queues()
        ]

    def jobs(self, queue: str, state: str, limit: int, cursor: str | None) -> dict[str, Any]:
        params: dict[str, Any] = {"state": state, "limit": limit}
        if cursor:
            params["cursor"] = cursor
        answer = self._send(
            _wire.Call(
                "GET",
                _wire.ns_path(self.namespace, f"/queues/{queue}/jobs"),
                f"list {state} jobs of queue {queue}",
                _raw,
                params=params,
                errors=_queue_errors(),
            )
        )
        return {"jobs": answer.get("jobs") or [], "next_cursor": answer.get("next_cursor")}

    def job(self, job_id: str) -> dict[str, Any]:
        return without_urls(self.client.job(job_id).status().raw)

    def cancel(self, job_id: str) -> dict[str, Any]:
        answer = self.client.job(job_id).cancel()
        return {
            "job_id": answer.job_id,
            "state": answer.state,
            "cancel_requested": answer.cancel_requested,
        }

    def retry(self, job_id: str) -> dict[str, Any]:
        return self._send(
            _wire.Call(
                "POST",
                _wire.ns_path(self.namespace, f"/jobs/{job_id}/retry"),
                f"retry job {job_id}",
                _raw,
                json={},
                errors=_job_errors(),
            )
        )

    def redrive(self, queue: str, states: Sequence[str] | None, limit: int | None) -> dict:
        body: dict[str, Any] = {}
        if states:
            body["states"] = list(states)
        if limit is not None:
            body["limit"] = limit
        return self._send(
            _wire.Call(
                "POST",
                _wire.ns_path(self.namespace, f"/queues/{queue}/redrive"),
                f"redrive queue {queue}",
                _raw,
                json=body,
                errors={**_queue_errors(), "invalid_request": InvalidRequest},
            )
        )

    def purge(self, queue: str) -> dict[str, Any]:
        return self._send(
            _wire.Call(
                "POST",
                _wire.ns_path(self.namespace, f"/queues/{queue}/purge"),
                f"purge queue {queue}",
                _raw,
                json={},
                errors=_queue_errors(),
            )
        )
