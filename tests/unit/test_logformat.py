"""The control plane's log formatter writes exactly what Powertools' own would (runtime/logformat.py
takes two per-line costs off, nothing else)."""

from __future__ import annotations

import logging
import sys

import pytest
from aws_lambda_powertools.logging.formatter import LambdaPowertoolsFormatter

from payloadstore_controlplane.runtime.logformat import LeanJsonFormatter


def _record(msg, *args, created: float, exc_info=None, **extra) -> logging.LogRecord:
    record = logging.LogRecord(
        "payloadstore", logging.INFO, "/x/logic.py", 42, msg, args, exc_info, "fn"
    )
    record.created, record.msecs = created, (created - int(created)) * 1000
    record.__dict__.update(extra)
    return record


def _exc_info():
    try:
        raise ValueError("boom")
    except ValueError:
        return sys.exc_info()


RECORDS = [
    ("job completed", (), {"state": "succeeded", "result_tier": "inline"}),
    ('{"as": "json"}', (), {}),
    ("[1, 2]", (), {}),
    ("42", (), {}),
    ("true", (), {}),
    ("null", (), {}),
    ("NaN", (), {}),
    (" {}", (), {}),
    ("", (), {}),
    ("jobs %s of %d", ("x", 3), {}),
    ({"a": "dict"}, (), {}),
    ("token refused", (), {"path": "/v1/x", "exc_info_key": None}),
]


@pytest.mark.parametrize(
    "options", [{}, {"utc": True}, {"datefmt": "%H:%M:%S.%F"}, {"use_rfc3339": True}]
)
def test_lines_are_the_ones_powertools_writes(options):
    # Given Powertools' formatter and ours, with the same options and keys
    theirs, ours = LambdaPowertoolsFormatter(**options), LeanJsonFormatter(**options)
    for f in (theirs, ours):
        f.append_keys(service="payloadstore", job_id="01ABC", cold_start=False)
    # When they format the same records, over several seconds and within one
    times = [1_764_790_000.123, 1_764_790_000.999, 1_764_790_001.0, 1_764_790_061.5005]
    for created in times:
        for msg, args, extra in RECORDS:
            a = theirs.format(_record(msg, *args, created=created, **extra))
            b = ours.format(_record(msg, *args, created=created, **extra))
            # Then every line is the same, byte for byte
            assert a == b, (msg, created)
    # And a line with an exception carries the same stack fields
    exc = _exc_info()
    assert theirs.format(_record("failed", created=times[0], exc_info=exc)) == ours.format(
        _record("failed", created=times[0], exc_info=exc)
    )


def test_the_control_plane_logger_uses_it():
    from payloadstore_controlplane.observability import logger

    assert isinstance(logger.registered_formatter, LeanJsonFormatter)
