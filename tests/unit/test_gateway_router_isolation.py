"""Powertools keeps the current event in class attributes shared by every resolver of a process;
the local gateway's containers must still give each concurrent invocation its own event."""

from __future__ import annotations

import json
import sys
import threading
import time

from payloadstore_devstack.containers import HandlerPool

MODULE = """
import threading
from aws_lambda_powertools.event_handler import APIGatewayRestResolver

app = APIGatewayRestResolver()
release = threading.Event()

@app.get("/jobs/<job_id>")
def job(job_id: str):
    if app.current_event.get_query_string_value("block"):
        release.wait(5)
    # Read after the wait, as a handler reading its body or identity late would.
    return {"asked": job_id, "event_path": app.current_event.path}

def handler(event, context):
    return app.resolve(event, context)
"""


def _event(job_id: str, block: bool = False) -> dict:
    return {
        "resource": "/jobs/{job_id}",
        "path": f"/jobs/{job_id}",
        "httpMethod": "GET",
        "headers": {},
        "multiValueHeaders": {},
        "queryStringParameters": {"block": "1"} if block else None,
        "multiValueQueryStringParameters": {"block": ["1"]} if block else None,
        "pathParameters": {"job_id": job_id},
        "requestContext": {"resourcePath": "/jobs/{job_id}", "httpMethod": "GET", "stage": "v"},
        "body": None,
        "isBase64Encoded": False,
    }


def test_given_an_invocation_parked_in_a_resolver_when_another_runs_then_each_reads_its_own_event(
    tmp_path, monkeypatch
):
    (tmp_path / "resolver_handler.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    pool = HandlerPool("resolver_handler.handler")
    results = {}
    # Given: an invocation for job A waiting inside its route
    slow = threading.Thread(target=lambda: results.update(slow=pool(_event("A", block=True), None)))
    slow.start()
    time.sleep(0.3)
    # When: an invocation for job B runs to completion meanwhile
    results["fast"] = pool(_event("B"), None)
    sys.modules["resolver_handler"].release.set()
    slow.join()
    # Then: A still reads A's event after B has come and gone
    assert json.loads(results["slow"]["body"]) == {"asked": "A", "event_path": "/jobs/A"}
    assert json.loads(results["fast"]["body"]) == {"asked": "B", "event_path": "/jobs/B"}
