"""`make sam-local`'s own logic, without Docker: reading what `sam local invoke` printed, turning
the events/ fixtures into requests about real state, and judging the answers."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from payloadstore_controlplane import routes
from tools.sam_local import __main__ as sam_local
from tools.sam_local import plan


def fake_sam(tmp_path: Path, stdout: str, stderr: str, exit_code: int = 0) -> Path:
    script = tmp_path / "sam"
    calls = tmp_path / "calls"
    script.write_text(
        "#!/bin/sh\n"
        f"echo call >> {calls}\n"
        f"printf '%s' '{stdout}'\n"
        f"printf '%s' '{stderr}' >&2\n"
        f"exit {exit_code}\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


@pytest.fixture
def run(tmp_path, monkeypatch):
    monkeypatch.setattr(sam_local, "BUILD", tmp_path / "build")
    engine = sam_local.DockerEngine(env={}, kind="machine", gateway_ip="10.213.7.1")

    def make(stdout: str, stderr: str = "", exit_code: int = 0) -> sam_local.Run:
        sam = fake_sam(tmp_path, stdout, stderr, exit_code)
        return sam_local.Run(sam, engine, "image", tmp_path / "env.json", {})

    return make


def _calls(tmp_path: Path) -> int:
    return len((tmp_path / "calls").read_text().splitlines())


def test_an_answer_on_stdout_is_the_functions_answer(run, tmp_path):
    # Given sam printing the handler's answer as its last stdout line
    r = run('START\n{"statusCode": 200, "body": "{}"}\n')
    # When the fixture is invoked
    answer, problem, _ = r.invoke("PublicFunction", "config", {"x": 1})
    # Then that JSON is the answer, and the event given to sam is the one prepared
    assert problem is None
    assert answer == {"statusCode": 200, "body": "{}"}
    assert json.loads((tmp_path / "build" / "events" / "config.json").read_text()) == {"x": 1}


def test_a_timeout_is_a_failure_though_sam_exits_0_and_is_tried_once_more(run, tmp_path):
    # Given sam that reports a timed-out function and exits 0 (as sam does)
    r = run("", "Function 'JobsFunction' timed out after 28 seconds\n", 0)
    # When the fixture is invoked
    answer, problem, _ = r.invoke("JobsFunction", "job_status", {})
    # Then it failed with the reason, after exactly one more try that is reported
    assert answer is None
    assert "timed out" in problem
    assert _calls(tmp_path) == 2
    assert r.retried == ["job_status"]


def test_no_json_answer_or_a_non_zero_exit_is_a_failure(run):
    assert "no JSON answer" in run("Traceback: boom\n").invoke("F", "a", {})[1]
    assert "sam exited 2" in run('{"ok": 1}\n', "", 2).invoke("F", "b", {})[1]


class FakeWorld:
    """Records which state was asked for; hands out fixed ids."""

    def __init__(self):
        self.asked: list[str] = []

    def token(self, ns, role):
        return f"pst_{ns}_{role}"

    def finished_job(self, ns, *, failed=False):
        self.asked.append("failed" if failed else "finished")
        return "01JFINISHED000000000000000"

    def queued_job(self, ns, queue=plan.QUEUED_QUEUE):
        self.asked.append(f"queued:{queue}")
        return "01JQUEUED00000000000000000"

    def delivered_job(self, ns):
        self.asked.append("delivered")
        return {"job_id": "01JDELIVERED00000000000000", "lease": "lease-1"}

    def multipart_job(self, ns, parts):
        self.asked.append(f"multipart:{len(parts)}")
        return "01JMULTIPART00000000000000"

    def issued_key(self, ns, size, kind="args", job_id=None, content_type=None, lease=None):
        self.asked.append(f"key:{kind}")
        return {
            "key": f"payloads/2026/12/01/01JKEY/{kind}",
            "bucket": "b",
            "size": size,
            "sha256": "0" * 64,
        }


def _fixtures() -> dict[str, plan.Fixture]:
    fixtures, problems = plan.load_fixtures(
        routes.FUNCTIONS, routes.ROUTES, getattr(routes, "SCHEDULES", ())
    )
    assert problems == []
    return {fx.name: fx for fx in fixtures}


def test_a_job_route_gets_a_real_job_in_the_state_its_method_needs():
    fixtures = _fixtures()
    world = FakeWorld()
    # When the job-status fixture (GET on a job) is prepared
    prepared = plan.prepare_api(world, fixtures["job_status"])
    # Then its sample job id became a finished job, everywhere API Gateway repeats it
    assert world.asked == ["finished"]
    assert prepared.event["pathParameters"]["job_id"] == "01JFINISHED000000000000000"
    assert plan.SAMPLE_JOB not in json.dumps(prepared.event)
    assert prepared.event["path"].endswith("/jobs/01JFINISHED000000000000000")
    # And the bearer token is one minted for the fixture's namespace and role
    assert prepared.event["headers"]["Authorization"] == "Bearer pst_dev_client"


def test_the_retry_fixture_gets_a_job_that_failed():
    world = FakeWorld()
    prepared = plan.prepare_api(world, _fixtures()["job_retry"])
    assert world.asked == ["failed"]
    assert prepared.event["path"].endswith("/jobs/01JFINISHED000000000000000/retry")


def test_a_daemon_post_gets_a_delivered_job_and_a_reference_an_issued_key():
    fixtures = _fixtures()
    world = FakeWorld()
    prepared = plan.prepare_api(world, fixtures["result_post"])
    assert world.asked[0] == "delivered"
    assert prepared.job_id == "01JDELIVERED00000000000000"
    world = FakeWorld()
    # When the enqueue-by-reference fixture is prepared
    prepared = plan.prepare_api(world, fixtures["enqueue_ref"])
    # Then its sample key (which embeds a job id) became an issued, uploaded key, no job made
    body = json.loads(prepared.event["body"])
    assert world.asked == ["key:args"]
    assert body["payloadRef"]["key"] == "payloads/2026/12/01/01JKEY/args"
    assert body["payloadRef"]["bucket"] == "b"


def test_answers_are_judged_by_status_and_body():
    fixtures = _fixtures()
    prepared = plan.Prepared(event=fixtures["config"].event, notes=[])
    ok = {
        "statusCode": 200,
        "headers": {"Content-Type": "application/json"},
        "body": json.dumps({"inline_threshold": 1, "max_payload_bytes": 2, "presign_ttl_s": 3}),
    }
    assert plan.check_api(fixtures["config"], prepared, ok) is None
    assert "HTTP 503" in plan.check_api(fixtures["config"], prepared, {**ok, "statusCode": 503})
    assert "lacks presign_ttl_s" in plan.check_api(
        fixtures["config"],
        prepared,
        {**ok, "body": json.dumps({"inline_threshold": 1, "max_payload_bytes": 2})},
    )
    assert "not an API Gateway proxy response" in plan.check_api(
        fixtures["config"], prepared, {"errorType": "NameError"}
    )
    assert "NameError" in plan.check_direct(fixtures["admin_mint"], {"errorType": "NameError"})


def test_the_final_line_counts_invocations(monkeypatch, capsys, tmp_path):
    # Given a run whose setup cannot even find Docker
    def no_docker():
        raise sam_local.DockerError("no engine")

    monkeypatch.setattr(sam_local, "BUILD", tmp_path / "build")
    monkeypatch.setattr(sam_local.signal, "signal", lambda *a: None)
    monkeypatch.setattr(sam_local.PrivateDockerd, "stop", lambda self: None)
    monkeypatch.setattr(sam_local, "machine_docker_answers", lambda: False)
    monkeypatch.setattr(sam_local.PrivateDockerd, "start", lambda self: no_docker())
    monkeypatch.setattr(sam_local, "ensure_sam", lambda venv: Path(os.devnull))
    monkeypatch.setattr(sam_local, "synth", lambda: 0.0)
    # When it runs
    code = sam_local.main([])
    # Then it fails, and its last line says so in the fixed form
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert code == 1
    assert last == "sam-local: 0 invocations, 0 ok, 1 failed"


def test_the_parts_fixture_gets_a_job_whose_multipart_upload_is_open():
    # Given the parts fixture (part URLs for a job's multipart upload)
    world = FakeWorld()
    # When it is prepared
    prepared = plan.prepare_api(world, _fixtures()["payloads_parts"])
    # Then its job is one presigned in parts for as many parts as the fixture names
    body = json.loads(prepared.event["body"])
    assert world.asked == [f"multipart:{len(body['parts'])}"]
    assert body["job_id"] == "01JMULTIPART00000000000000"


def test_a_new_blob_answer_passes_with_a_single_put_or_a_multipart_upload():
    fixture = _fixtures()["blob_create"]
    prepared = plan.Prepared(event=fixture.event, notes=[])
    new = {"sha256": "b" * 64, "size": 268435456, "exists": False, "key": "blobs/dev/b"}

    def answer(body):
        return {"statusCode": 200, "headers": {}, "body": json.dumps(body)}

    single = {"upload": {"url": "u", "headers": {}, "expires_at": 1}}
    multipart = {"multipart": {"upload_id": "x", "part_bytes": 16777216, "part_count": 16}}
    assert plan.check_api(fixture, prepared, answer({**new, **single})) is None
    assert plan.check_api(fixture, prepared, answer({**new, **multipart})) is None
    # Neither is a failure that names what is missing
    assert "not an object" in plan.check_api(fixture, prepared, answer(new))
    assert "part_count" in plan.check_api(
        fixture, prepared, answer({**new, "multipart": {"upload_id": "x", "part_bytes": 1}})
    )
