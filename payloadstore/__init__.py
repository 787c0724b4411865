"""payloadstore: the SDK of a two-tier (inline Redis / presigned S3) job payload store.

    from payloadstore import Client, Daemon

Names are resolved on first use, so importing the package, or one module of it (e.g.
`payloadstore.errors`), does not pull in httpx, msgpack or the codec.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "ALL_COMPLETED": "._many",
    "FIRST_COMPLETED": "._many",
    "AsyncClient": ".aio",
    "Blob": "._blobs",
    "blob": "._blobs",
    "AsyncJob": ".aio",
    "AsyncQueue": ".aio",
    "BatchError": ".errors",
    "DoneAndPending": ".client",
    "WaitTimeout": ".errors",
    "as_completed": "._waiting",
    "wait": "._waiting",
    "Client": ".client",
    "Job": ".client",
    "JobInfo": ".client",
    "JobPage": ".client",
    "RetryAnswer": ".client",
    "RedriveAnswer": ".client",
    "PurgeAnswer": ".client",
    "JobStatus": ".client",
    "Queue": ".client",
    "QueueInfo": ".client",
    "ServerConfig": ".client",
    "Daemon": ".daemon",
    "RetryPolicy": "._http",
    "ApiError": ".errors",
    "AuthError": ".errors",
    "BlobSourceGone": ".errors",
    "ConfigError": ".errors",
    "ConflictError": ".errors",
    "EnqueueUnconfirmed": ".errors",
    "InlineNever": ".errors",
    "InlineUnavailable": ".errors",
    "PolicyMismatch": ".errors",
    "InvalidRequest": ".errors",
    "JobCancelled": ".errors",
    "JobFailed": ".errors",
    "LeaseMismatch": ".errors",
    "CurrentJob": ".daemon",
    "current_job": ".daemon",
    "JobNotFound": ".errors",
    "NotRetryable": ".errors",
    "PayloadConsumed": ".errors",
    "PayloadCorrupt": ".errors",
    "PayloadError": ".errors",
    "PayloadLost": ".errors",
    "PayloadStoreError": ".errors",
    "PayloadTooLarge": ".errors",
    "QueueNotFound": ".errors",
    "ResultTimeout": ".errors",
    "ServiceUnavailable": ".errors",
    "TransferError": ".errors",
}

__all__ = [
    "ALL_COMPLETED",
    "FIRST_COMPLETED",
    "ApiError",
    "AsyncClient",
    "AsyncJob",
    "AsyncQueue",
    "AuthError",
    "BatchError",
    "Blob",
    "BlobSourceGone",
    "Client",
    "ConfigError",
    "ConflictError",
    "CurrentJob",
    "Daemon",
    "DoneAndPending",
    "EnqueueUnconfirmed",
    "InlineNever",
    "InlineUnavailable",
    "InvalidRequest",
    "Job",
    "JobCancelled",
    "JobFailed",
    "JobInfo",
    "JobNotFound",
    "JobPage",
    "JobStatus",
    "LeaseMismatch",
    "NotRetryable",
    "PayloadConsumed",
    "PayloadCorrupt",
    "PayloadError",
    "PayloadLost",
    "PayloadStoreError",
    "PayloadTooLarge",
    "PolicyMismatch",
    "PurgeAnswer",
    "Queue",
    "QueueInfo",
    "QueueNotFound",
    "RedriveAnswer",
    "ResultTimeout",
    "RetryAnswer",
    "RetryPolicy",
    "ServerConfig",
    "ServiceUnavailable",
    "TransferError",
    "WaitTimeout",
    "as_completed",
    "blob",
    "current_job",
    "wait",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'payloadstore' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from ._blobs import Blob, blob
    from ._http import RetryPolicy
    from .client import (
        Client,
        Job,
        JobInfo,
        JobPage,
        JobStatus,
        PurgeAnswer,
        Queue,
        RedriveAnswer,
        RetryAnswer,
        ServerConfig,
    )
    from .daemon import CurrentJob, Daemon, current_job
    from .errors import (
        ApiError,
        AuthError,
        BlobSourceGone,
        ConfigError,
        ConflictError,
        EnqueueUnconfirmed,
        InlineNever,
        InlineUnavailable,
        InvalidRequest,
        JobCancelled,
        JobFailed,
        JobNotFound,
        LeaseMismatch,
        NotRetryable,
        PayloadConsumed,
        PayloadCorrupt,
        PayloadError,
        PayloadLost,
        PayloadStoreError,
        PayloadTooLarge,
        PolicyMismatch,
        ResultTimeout,
        ServiceUnavailable,
        TransferError,
    )
