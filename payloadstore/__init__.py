"""payloadstore: the SDK of a two-tier (inline Redis / presigned S3) job payload store."""

from .client import Client, Job, JobStatus, Queue, ServerConfig
from .daemon import Daemon
from .errors import (
    ApiError,
    AuthError,
    ConfigError,
    ConflictError,
    InvalidRequest,
    JobFailed,
    JobNotFound,
    PayloadCorrupt,
    PayloadError,
    PayloadLost,
    PayloadStoreError,
    PayloadTooLarge,
    ResultTimeout,
    ServiceUnavailable,
    TransferError,
)
from ._http import RetryPolicy

__all__ = [
    "ApiError",
    "AuthError",
    "Client",
    "ConfigError",
    "ConflictError",
    "Daemon",
    "InvalidRequest",
    "Job",
    "JobFailed",
    "JobNotFound",
    "JobStatus",
    "PayloadCorrupt",
    "PayloadError",
    "PayloadLost",
    "PayloadStoreError",
    "PayloadTooLarge",
    "Queue",
    "ResultTimeout",
    "RetryPolicy",
    "ServerConfig",
    "ServiceUnavailable",
    "TransferError",
]
