"""What the dashboard asks of the control plane, through the SDK's client and its token.

Each method answers plain JSON-ready dicts (the control plane's own fields, as the wire has
them), so the page shows what `payloadstore status` would print. Presigned URLs never reach the
browser: they are dropped from every answer (a GET URL is a credential for its object), and a
download of a job's arguments or result is streamed through this process (`download`), which
fetches the presigned GET itself.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from .._preview import describe
from ..client import Client

# The payloads a job has, as the dashboard's routes name them.
PAYLOAD_KINDS = ("args", "result")
DOWNLOAD_CHUNK = 256 * 1024


@dataclass(frozen=True)
class Download:
    """A payload being sent to the browser: its size (None: unknown) and its bytes, in chunks."""

    size: int | None
    chunks: Iterator[bytes]


class Backend(Protocol):
    """The dashboard server's view of the control plane: `ClientBackend`, or a stand-in."""

    namespace: str
    endpoint: str

    def queues(self) -> list[dict[str, Any]]: ...
    def jobs(self, queue: str, state: str, limit: int, cursor: str | None) -> dict[str, Any]: ...
    def job(self, job_id: str) -> dict[str, Any]: ...
    def cancel(self, job_id: str) -> dict[str, Any]: ...
    def retry(self, job_id: str) -> dict[str, Any]: ...
    def redrive(self, queue: str, states: Sequence[str] | None, limit: int | None) -> dict: ...
    def purge(self, queue: str) -> dict[str, Any]: ...
    def policy(self) -> dict[str, Any]: ...
    def throughput(self, queue: str | None) -> dict[str, Any]: ...
    def payloads(self, job_id: str) -> dict[str, Any]: ...
    def download(self, job_id: str, kind: str) -> AbstractContextManager[Download | None]: ...


# Keys of an answer that hold presigned URLs: a bearer credential for one object each.
URL_KEYS = frozenset({"download", "upload", "url"})


def without_urls(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: without_urls(v) for k, v in value.items() if k not in URL_KEYS}
    if isinstance(value, list):
        return [without_urls(v) for v in value]
    return value


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

    def queues(self) -> list[dict[str, Any]]:
        return [asdict(q) for q in self.client.queues()]

    def jobs(self, queue: str, state: str, limit: int, cursor: str | None) -> dict[str, Any]:
        # One page per call (the page keeps the cursor), not Queue.jobs' iterator over all.
        page = self.client.wire.list_jobs(queue, state=state, limit=limit, cursor=cursor)
        return {
            "jobs": [without_urls(job.raw) for job in page.jobs],
            "next_cursor": page.next_cursor,
        }

    def job(self, job_id: str) -> dict[str, Any]:
        return without_urls(self.client.job(job_id).status().raw)

    def cancel(self, job_id: str) -> dict[str, Any]:
        return asdict(self.client.job(job_id).cancel())

    def retry(self, job_id: str) -> dict[str, Any]:
        return asdict(self.client.job(job_id).retry())

    def redrive(self, queue: str, states: Sequence[str] | None, limit: int | None) -> dict:
        return asdict(self.client.queue(queue).redrive(states, limit))

    def purge(self, queue: str) -> dict[str, Any]:
        # Queue.purge calls again while the control plane says some remain (each call is
        # bounded in time on the server).
        return asdict(self.client.queue(queue).purge())

    def policy(self) -> dict[str, Any]:
        """The namespace's policy, as `/v1/config` answers it now (not the client's cached copy)."""
        return asdict(self.client.wire.config().policy)

    def throughput(self, queue: str | None) -> dict[str, Any]:
        return asdict(self.client.throughput(queue))

    def payloads(self, job_id: str) -> dict[str, Any]:
        """The job's arguments and result: facts and a bounded preview each (an S3 value's
        first bytes are read through its presigned GET, here; the URL is not passed on)."""
        stored = self.client.job(job_id).payloads()
        http = self.client.wire.http
        return {
            "job_id": stored.job_id,
            "queue": stored.queue,
            "state": stored.state,
            "args": describe(stored.args, http),
            "result": describe(stored.result, http) if stored.result else None,
        }

    @contextmanager
    def download(self, job_id: str, kind: str) -> Iterator[Download | None]:
        """The job's arguments or result (`kind`), whole: inline bytes, or the S3 object
        streamed from its presigned GET. None when the job has none to give."""
        stored = self.client.job(job_id).payloads()
        value = stored.args if kind == "args" else stored.result
        if value is None or value.gone:
            yield None
        elif value.inline is not None:
            yield Download(len(value.inline), iter([value.inline]))
        elif value.download_url:
            with self.client.wire.http.stream("GET", value.download_url) as response:
                if response.status_code != 200:
                    yield None
                    return
                length = response.headers.get("Content-Length")
                yield Download(
                    int(length) if length and length.isdigit() else None,
                    response.iter_bytes(DOWNLOAD_CHUNK),
                )
        else:
            yield None
