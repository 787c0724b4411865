"""The log formatter of the control plane: Powertools' JSON formatter, line for line the same
output, with two of its per-line costs taken off the common line (tests/unit/test_logformat.py
formats the same records with both and compares).

A job's INFO lines run inside a request that has pushed the formatter out of the CPU's caches,
where one line costs ~135 us on the hot path of a small job (bench/bench_hot_path.py), ~25 us
of it here:
- the message is parsed as JSON whenever it is a string (Powertools turns a JSON message into
  an object); ours never start as JSON can, so a message whose first character no JSON text
  starts with is taken as it is, without a failed parse and the exception it raises;
- the timestamp is formatted with strftime twice per line; its second-wide part is formatted
  once a second here (the default format only: a custom datefmt or RFC 3339 goes Powertools'
  way)."""

from __future__ import annotations

import logging
import time

from aws_lambda_powertools.logging.formatter import LambdaPowertoolsFormatter

# Characters a JSON text may start with (json.loads also takes NaN and Infinity, and leading
# whitespace); a message starting with anything else is no JSON.
_JSON_START = frozenset('{["-0123456789tfnNI \t\r\n')


class LeanJsonFormatter(LambdaPowertoolsFormatter):
    _second: tuple[int, str, str] | None = None

    def _extract_log_message(self, log_record: logging.LogRecord):
        message = log_record.msg
        if (
            isinstance(message, str)
            and message
            and not log_record.args
            and message[0] not in _JSON_START
        ):
            return message
        return super()._extract_log_message(log_record)

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        if self.use_rfc3339_iso8601 or self.use_datetime_directive or datefmt or self.datefmt:
            return super().formatTime(record, datefmt)
        # Powertools' default: "%Y-%m-%d %H:%M:%S,<ms>%z" of the record's time.
        second = int(record.created)
        cached = self._second
        if cached is None or cached[0] != second:
            struct = self.converter(record.created)
            cached = (
                second,
                time.strftime("%Y-%m-%d %H:%M:%S,", struct),
                time.strftime("%z", struct),
            )
            self._second = cached
        return f"{cached[1]}{int(record.msecs):03d}{cached[2]}"
