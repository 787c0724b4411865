"""A cancel whose first answer was lost (issue 21): the SDK's retried DELETE meets `409, the job is
cancelled` and reports the cancel as done, as the lost 200 would have; a 409 to a first attempt,
or for a job that ended otherwise, stays `ConflictError`."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from payloadstore import ConflictError, _wire
from payloadstore._async_wire import AsyncWire
from payloadstore._wire import CancelAnswer
from tests.unit.sdk_fakes import FakeWorld, make_client

JOB = "01KB7Z6Q3N4V8W2X5Y9Z0A1B2C"


class CancelRoute:
    """`DELETE .../jobs/{job_id}` as functions/payloadstore_controlplane/logic/lifecycle.py `cancel` answers
    it for one job, with one fault per attempt: `lose` (the request lands, its answer is lost
    on the way back: a read timeout), `refuse` (a 503 before anything happened), or None."""

    def __init__(self, state: str, faults: list[str | None], *, state_field: bool = True):
        self.state = state
        self.faults = list(faults)
        self.state_field = state_field
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        assert request.method == "DELETE" and request.url.path.endswith(f"/jobs/{JOB}")
        self.requests.append(request)
        fault = self.faults.pop(0) if self.faults else None
        if fault == "refuse":
            return httpx.Response(
                503, json={"error": {"code": "service_unavailable", "message": "redis down"}}
            )
        if self.state == "queued":
            self.state = "cancelled"
            answer = httpx.Response(200, json={"job_id": JOB, "state": "cancelled"})
        elif self.state == "running":
            answer = httpx.Response(
                202, json={"job_id": JOB, "state": "running", "cancel_requested": True}
            )
        else:
            error = {
                "code": "conflict",
                "message": f"job {JOB} is {self.state}; it cannot be cancelled",
            }
            if self.state_field:
                error["state"] = self.state
            answer = httpx.Response(409, json={"error": error})
        if fault == "lose":
            raise httpx.ReadTimeout("the answer was lost on the way back", request=request)
        return answer


def sync_cancel(route: CancelRoute) -> CancelAnswer:
    world = FakeWorld()
    world.fail("DELETE", f"/jobs/{JOB}", *[route] * 10)
    return make_client(world).job(JOB).cancel()


def async_cancel(route: CancelRoute) -> CancelAnswer:
    async def sleep(seconds: float) -> None:
        return None

    async def main() -> CancelAnswer:
        wire = AsyncWire(
            "http://cp.test",
            "pst_good",
            "ns",
            http=httpx.AsyncClient(transport=httpx.MockTransport(route)),
            sleep=sleep,
        )
        try:
            return await wire.cancel_job(JOB)
        finally:
            await wire.http.aclose()

    return asyncio.run(main())


TRANSPORTS = pytest.mark.parametrize("cancel", [sync_cancel, async_cancel], ids=["sync", "async"])
DONE = CancelAnswer(job_id=JOB, state="cancelled", cancel_requested=False)


@TRANSPORTS
def test_given_a_queued_job_when_the_cancels_200_is_lost_then_the_retrys_409_cancelled_is_the_cancel_done(
    cancel,
):
    # Given: a queued job; the first DELETE cancels it but its 200 never arrives
    route = CancelRoute("queued", ["lose"])
    # When: the SDK cancels it (and retries after the read timeout)
    answer = cancel(route)
    # Then: the retry's 409 (the job is cancelled) is the cancel that worked, the same answer a
    # first-time 200 gives
    assert len(route.requests) == 2 and route.state == "cancelled"
    assert answer == DONE
    assert answer == cancel(CancelRoute("queued", []))


@TRANSPORTS
def test_given_a_job_cancelled_meanwhile_when_a_retried_cancel_gets_409_cancelled_then_done(cancel):
    # Given: a first attempt refused by a 503, and the job cancelled by then (by the first
    # attempt on a reply that never came back, or by another caller)
    route = CancelRoute("cancelled", ["refuse"])
    # Then: the job is cancelled, which is what was asked
    assert cancel(route) == DONE
    assert len(route.requests) == 2


@TRANSPORTS
@pytest.mark.parametrize("state", ["cancelled", "succeeded", "failed"])
def test_given_a_first_attempt_when_the_answer_is_409_then_conflict_error_as_before(cancel, state):
    # Given: no retry happened: the job had ended before this cancel
    route = CancelRoute(state, [])
    # Then: ConflictError, whatever the state (this call cancelled nothing)
    with pytest.raises(ConflictError) as info:
        cancel(route)
    assert info.value.status == 409 and state in str(info.value)
    assert len(route.requests) == 1


@TRANSPORTS
@pytest.mark.parametrize("state", ["succeeded", "failed", "payload_lost"])
def test_given_a_retried_cancel_when_the_job_ended_otherwise_then_conflict_error(cancel, state):
    # Given: the first attempt's answer was lost, and the job had finished some other way
    route = CancelRoute(state, ["lose"])
    # Then: the cancel did not happen: ConflictError
    with pytest.raises(ConflictError):
        cancel(route)
    assert len(route.requests) == 2


@TRANSPORTS
def test_given_an_older_control_plane_without_the_409s_state_when_retried_then_conflict_error(
    cancel,
):
    # Given: a 409 that names the state only in its message text: the SDK never decides on text
    route = CancelRoute("queued", ["lose"], state_field=False)
    with pytest.raises(ConflictError):
        cancel(route)


def test_given_the_cancel_call_then_only_a_retried_409_with_state_cancelled_is_an_answer():
    call = _wire.cancel_job("ns", JOB)

    def conflict(**error) -> httpx.Response:
        return httpx.Response(409, json={"error": {"code": "conflict", "message": "m", **error}})

    assert call.retried is not None
    assert call.retried(conflict(state="cancelled")) == DONE
    assert call.retried(conflict(state="succeeded")) is None
    assert call.retried(conflict()) is None
    assert call.retried(httpx.Response(404, json={"error": {"code": "not_found"}})) is None
    assert call.retried(httpx.Response(409, text="<html>")) is None
