"""How long a long-poll may wait in this invocation (issue 23, "waits that always answer").

A daemon poll or `result?wait` must answer before the function's own timeout and before API
Gateway's integration timeout (29 s, counted from when API Gateway received the request: a cold
start's init is inside it, the function's timeout is not). So the wait is capped by both clocks,
less ANSWER_MARGIN_S for what follows the wait (the last Redis call, the answer, the way back):

- the invocation's remaining time, `context.get_remaining_time_in_millis()`;
- 29 s less the time since `requestContext.requestTimeEpoch`, when that is plausible (0..29 s
  ago: a sample event's fixed epoch, or a skewed clock, is ignored rather than trusted).

`infra/functions.py` checks at synth that POLL_MAX_WAIT_S / RESULT_MAX_WAIT_S leave room for a
cold start under both limits (`check_wait_caps`); this is what keeps the promise at run time.
"""

from __future__ import annotations

import math
import time
from typing import Any

from ..routes import API_GATEWAY_TIMEOUT_S, LONG_POLL_ANSWER_MARGIN_S

ANSWER_MARGIN_S = LONG_POLL_ANSWER_MARGIN_S


def wait_budget_s(event: dict | None, context: Any, now: float | None = None) -> float:
    """Seconds this invocation may still block and answer in time (inf when nothing says)."""
    now = time.time() if now is None else now
    limits: list[float] = []
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    if callable(remaining):
        limits.append(remaining() / 1000.0)
    started_ms = ((event or {}).get("requestContext") or {}).get("requestTimeEpoch")
    if isinstance(started_ms, (int, float)) and not isinstance(started_ms, bool):
        elapsed = now - started_ms / 1000.0
        if 0.0 <= elapsed <= API_GATEWAY_TIMEOUT_S:
            limits.append(API_GATEWAY_TIMEOUT_S - elapsed)
    if not limits:
        return math.inf
    return max(min(limits) - ANSWER_MARGIN_S, 0.0)


def capped_wait(app: Any, wait_s: float) -> float:
    """`wait_s`, shortened to what the current invocation of `app` (a resolver) can afford."""
    return min(wait_s, wait_budget_s(app.current_event.raw_event, app.lambda_context))
