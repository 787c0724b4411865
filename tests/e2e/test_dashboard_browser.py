"""`payloadstore dashboard` in a real headless browser: Debian's Chromium driven by Playwright.

The dashboard runs as a user starts it (`payloadstore dashboard --port 0` in a directory with
the local stack's .devstack.json), in front of the local gateway; a daemon's function fails on
its first run and succeeds after. The browser finds the failed job, reads its remote traceback,
retries it (confirming) and sees it succeed.

Chromium is Debian's package (`make test` installs it when missing, as root); Playwright's own
browser download is never used. Without Chromium this test fails: it does not skip.
"""

from __future__ import annotations

import os
import queue as queue_module
import re
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from payloadstore.errors import JobFailed
from payloadstore_devstack.services import ServiceError, find_chromium
from tests.e2e.sdk_helpers import clients, daemon_thread, unique_queue
from tests.e2e.test_cli import Shell

pytestmark = pytest.mark.e2e

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# Where the screenshot of the failed job's page goes (default: the test's tmp_path).
SCREENSHOT_ENV = "PAYLOADSTORE_DASHBOARD_SCREENSHOT"


@pytest.fixture(scope="module")
def browser():
    try:
        executable = find_chromium(install=False)
    except ServiceError as e:
        pytest.fail(f"{e}; `make test` installs it")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


def read_lines(stream, lines: queue_module.Queue) -> None:
    for line in stream:
        lines.put(line)


@pytest.fixture
def shell(tmp_path, local_gateway) -> Shell:
    return Shell(tmp_path, local_gateway)


@pytest.fixture
def dashboard_url(shell) -> Iterator[str]:
    """`payloadstore dashboard --port 0` started from the local stack's directory; its URL."""
    proc = shell.start("dashboard", "--port", "0", "--refresh", "1")
    lines: queue_module.Queue = queue_module.Queue()
    threading.Thread(target=read_lines, args=(proc.stderr, lines), daemon=True).start()
    seen: list[str] = []
    try:
        while True:
            try:
                line = lines.get(timeout=30)
            except queue_module.Empty:
                pytest.fail(f"the dashboard printed no url within 30 s: {seen}")
            seen.append(line)
            found = re.search(r"dashboard url=(\S+)", line)
            if found:
                break
        yield found.group(1)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def test_given_a_failed_job_when_retried_in_the_dashboard_then_its_traceback_shows_and_it_succeeds(
    local_gateway, dashboard_url, browser, tmp_path
):
    from playwright.sync_api import expect

    # Given: a daemon whose function fails on its first run only, and a job that failed on it
    client, daemon_client = clients(local_gateway)
    queue = unique_queue("dashboard")
    runs: list[int] = []

    def flaky(value):
        runs.append(value)
        if len(runs) == 1:
            raise RuntimeError("disk full on the first run <b>not bold</b>")
        return value * 2

    with daemon_thread(daemon_client, queue, flaky):
        job = client.queue(queue).add(21)
        with pytest.raises(JobFailed):
            job.result(timeout=60)

        # When: the operator opens the dashboard, picks the queue, its failed jobs, the job
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(dashboard_url)
        expect(page.locator("#namespace")).to_have_text("dev")
        queue_row = page.locator("#queues tbody tr", has_text=queue)
        expect(queue_row.locator(".count-failed")).to_have_text("1")
        queue_row.click()
        page.get_by_role("tab", name="failed").click()
        row = page.locator(f'#jobs tbody tr[data-job-id="{job.job_id}"]')
        expect(row).to_contain_text("RuntimeError")
        row.click()

        # Then: the job's detail shows its state, attempts and the remote traceback, as text
        expect(page.locator("#detail-id")).to_have_text(job.job_id)
        expect(page.locator("#detail-fields")).to_contain_text("failed")
        expect(page.locator("#error-type")).to_have_text("RuntimeError")
        traceback = page.locator("#traceback")
        expect(traceback).to_contain_text("Traceback (most recent call last)")
        expect(traceback).to_contain_text("disk full on the first run <b>not bold</b>")
        assert page.locator("#traceback b, #error-message b").count() == 0
        shot = Path(os.environ.get(SCREENSHOT_ENV) or tmp_path / "dashboard.png")
        page.screenshot(path=str(shot), full_page=True)
        assert shot.stat().st_size > 10_000

        # When: they retry it, confirming in the dialog
        page.locator("#retry").click()
        expect(page.locator("#confirm")).to_be_visible()
        expect(page.locator("#confirm-text")).to_contain_text(job.job_id)
        page.locator("#confirm-yes").click()

        # Then: the page says it is queued again, and shows it succeed
        expect(page.locator("#notice")).to_contain_text("queued again")
        expect(page.locator("#detail-fields")).to_contain_text("succeeded", timeout=60_000)
        expect(page.locator("#retry")).to_be_disabled()
        # And: the queue no longer counts it failed
        expect(queue_row.locator(".count-failed")).to_have_text("0")
        page.screenshot(path=str(shot.with_name(shot.stem + "-retried.png")), full_page=True)
        assert job.result(timeout=30) == 42
        assert runs == [21, 21]
        assert errors == []
        page.close()


def test_given_failed_and_queued_jobs_when_purged_and_redriven_in_the_dashboard_then_cancelled_and_run_again(
    local_gateway, dashboard_url, browser
):
    from playwright.sync_api import expect

    # Given: two jobs that failed on a broken function, and two queued with no daemon running
    client, daemon_client = clients(local_gateway)
    queue = unique_queue("dashboard-ops")
    broken = [True]

    def work(value):
        if broken[0]:
            raise ValueError(f"bad input {value}")
        return value + 1

    with daemon_thread(daemon_client, queue, work):
        failed = [client.queue(queue).add(n) for n in (1, 2)]
        for job in failed:
            with pytest.raises(JobFailed):
                job.result(timeout=60)
    waiting = [client.queue(queue).add(n) for n in (3, 4)]

    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(dashboard_url)
    page.locator("#queues tbody tr", has_text=queue).click()
    page.get_by_role("tab", name="queued").click()
    expect(page.locator("#jobs tbody tr")).to_have_count(2)

    # When: purge is asked for, then called off at the confirmation
    page.locator("#purge").click()
    expect(page.locator("#confirm-text")).to_contain_text(queue)
    page.locator("#confirm-no").click()
    # Then: nothing changed
    expect(page.locator("#confirm")).to_be_hidden()
    assert [client.job(j.job_id).status().state for j in waiting] == ["queued", "queued"]

    # When: purge is confirmed
    page.locator("#purge").click()
    page.locator("#confirm-yes").click()
    # Then: both queued jobs are cancelled, and listed as such
    expect(page.locator("#notice")).to_contain_text("cancelled=2")
    expect(page.locator("#jobs tbody tr")).to_have_count(0)
    page.get_by_role("tab", name="cancelled").click()
    expect(page.locator("#jobs tbody tr")).to_have_count(2)
    assert [client.job(j.job_id).status().state for j in waiting] == ["cancelled", "cancelled"]

    # When: the function is fixed and the failed jobs are redriven
    broken[0] = False
    with daemon_thread(daemon_client, queue, work):
        page.get_by_role("tab", name="failed").click()
        expect(page.locator("#jobs tbody tr")).to_have_count(2)
        expect(page.locator("#jobs tbody")).to_contain_text("ValueError")
        page.locator("#redrive").click()
        page.locator("#confirm-yes").click()
        # Then: both run again and succeed; the failed tab empties, the succeeded tab has them
        expect(page.locator("#notice")).to_contain_text("retried=2")
        assert [j.result(timeout=60) for j in failed] == [2, 3]
        expect(page.locator("#jobs tbody tr")).to_have_count(0)
        page.get_by_role("tab", name="succeeded").click()
        for job in failed:
            expect(page.locator(f'#jobs tbody tr[data-job-id="{job.job_id}"]')).to_be_visible()
    page.close()


def test_given_a_namespace_with_a_policy_when_opened_then_counts_chart_policy_and_arguments_show(
    local_gateway, browser, ssm_client, tmp_path
):
    from playwright.sync_api import expect

    from payloadstore import Client, codec
    from payloadstore.dashboard import ClientBackend, Dashboard
    from tests.e2e.test_namespace_policies import _cli, _namespace

    # Given: a namespace whose policy is 7d + the stack's key + inline never (every payload in
    # S3), three jobs that succeeded and one that failed on arrays
    ns, tokens = _namespace(local_gateway, ssm_client, "dash")
    policy = ("--retention", "7d", "--kms-key", "stack", "--inline", "never")
    assert _cli(local_gateway, "namespace", "policy", ns, *policy).returncode == 0
    client = Client(local_gateway.url, tokens["client"], ns)
    daemon_client = Client(local_gateway.url, tokens["daemon"], ns)
    queue = unique_queue("dashboard-views")

    def work(image, label):
        if label == "corrupt":
            raise ValueError(f"label {label!r} refused for an image of {image.shape}")
        return {"label": label, "mean": float(image.mean()), "mask": image > 0}

    image = np.arange(48, dtype=np.float32).reshape(4, 12)
    with daemon_thread(daemon_client, queue, work):
        ok = [client.queue(queue).add(image, label) for label in ("cat", "dog", "bird")]
        bad = client.queue(queue).add(image, "corrupt")
        for job in ok:
            job.result(timeout=60)
        with pytest.raises(JobFailed):
            bad.result(timeout=60)

    with Dashboard(
        ClientBackend(client),
        "127.0.0.1",
        0,
        secrets_to_hide=ClientBackend.secrets(client),
        refresh_s=1.0,
    ) as dashboard:
        dashboard.start()
        page = browser.new_page(viewport={"width": 1280, "height": 1100}, accept_downloads=True)
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))

        # When: the operator opens the page
        page.goto(dashboard.url)

        # Then: the header shows the namespace's policy
        expect(page.locator("#namespace")).to_have_text(ns)
        expect(page.locator("#policy-retention")).to_have_text("7d")
        expect(page.locator("#policy-kms")).to_have_text("stack")
        expect(page.locator("#policy-inline")).to_have_text("never")
        # And: the queue's row counts jobs per state: none queued or running, one failed
        row = page.locator("#queues tbody tr", has_text=queue)
        expect(row.locator(".count-queued")).to_have_text("0")
        expect(row.locator(".count-running")).to_have_text("0")
        expect(row.locator(".count-failed")).to_have_text("1")
        # And: the chart has the hour's ends: 3 succeeded and 1 failed, drawn as bars
        expect(page.locator("#throughput-succeeded")).to_have_text("3")
        expect(page.locator("#throughput-failed")).to_have_text("1")
        expect(page.locator("#throughput-chart rect.bar-succeeded").first).to_be_attached()
        expect(page.locator("#throughput-chart rect.bar-failed").first).to_be_attached()

        # When: they open the failed job
        row.click()
        expect(page.locator("#throughput-scope")).to_have_text(f"queue {queue}")
        page.get_by_role("tab", name="failed").click()
        page.locator(f'#jobs tbody tr[data-job-id="{bad.job_id}"]').click()

        # Then: its arguments show decoded (the array as shape and dtype), from S3, with a link
        args = page.locator("#args-preview")
        expect(args).to_contain_text("<ndarray shape=(4, 12) dtype=<f4, 192 bytes>")
        expect(args).to_contain_text("'corrupt'")
        expect(page.locator("#args-meta")).to_contain_text("S3")
        expect(page.locator("#args-meta")).to_contain_text(f"{bad.job_id}/args")
        expect(page.locator("#result-preview")).to_contain_text("no result (failed)")
        expect(page.locator("#result-download")).to_be_hidden()
        expect(page.locator("#args-download")).to_be_visible()
        expect(page.locator("#error-message")).to_contain_text("refused for an image of (4, 12)")
        shot = Path(os.environ.get(SCREENSHOT_ENV) or tmp_path / "dashboard.png")
        shot = shot.with_name(shot.stem + "-policy" + shot.suffix)
        page.screenshot(path=str(shot), full_page=True)
        assert shot.stat().st_size > 10_000

        # When: they download the arguments
        with page.expect_download() as download:
            page.locator("#args-download").click()
        # Then: the file is the stored payload, through the dashboard (no S3 URL in the page)
        saved = tmp_path / "args.msgpack"
        download.value.save_as(saved)
        decoded = codec.decode(saved.read_bytes())
        assert decoded["args"][1] == "corrupt"
        assert np.array_equal(decoded["args"][0], image)
        assert "X-Amz-Signature" not in page.content()

        # And: a succeeded job shows its result, with its array's shape
        page.get_by_role("tab", name="succeeded").click()
        page.locator(f'#jobs tbody tr[data-job-id="{ok[0].job_id}"]').click()
        expect(page.locator("#result-preview")).to_contain_text("'label': 'cat'")
        expect(page.locator("#result-preview")).to_contain_text("<ndarray shape=(4, 12) dtype=|b1")
        assert errors == []
        page.close()
    client.close()
    daemon_client.close()


CHART_WIDTHS = (1400, 700, 480)
# Label boxes may touch the chart's edge by antialiasing, not more.
EDGE_PX = 0.5

_LABEL_BOXES = """() => {
  const chart = document.querySelector('#throughput-chart').getBoundingClientRect();
  const texts = [...document.querySelectorAll('#throughput-chart text')].map((t) => {
    const r = t.getBoundingClientRect();
    return {text: t.textContent, left: r.left, right: r.right,
            top: r.top, bottom: r.bottom};
  });
  return {chart: {left: chart.left, right: chart.right, top: chart.top, bottom: chart.bottom},
          texts};
}"""


def _overlap(a: dict, b: dict) -> bool:
    return (
        a["left"] < b["right"]
        and b["left"] < a["right"]
        and a["top"] < b["bottom"]
        and b["top"] < a["bottom"]
    )


def _assert_labels_read_right(boxes: dict, peak: int, where: str) -> None:
    chart, texts = boxes["chart"], boxes["texts"]
    # Counts on the y axis, times on the x axis
    y_labels = [t["text"] for t in texts if t["text"].isdigit()]
    x_labels = [t["text"] for t in texts if not t["text"].isdigit()]
    # Each label is inside the chart (none clipped, as "1004" was to "ı004")
    for t in texts:
        assert t["left"] >= chart["left"] - EDGE_PX and t["right"] <= chart["right"] + EDGE_PX, (
            where,
            t,
            chart,
        )
        assert t["top"] >= chart["top"] - EDGE_PX and t["bottom"] <= chart["bottom"] + EDGE_PX, (
            where,
            t,
            chart,
        )
    # No two labels overlap, and no label repeats on its axis (an empty chart had "1" twice)
    for i, a in enumerate(texts):
        for b in texts[i + 1 :]:
            assert not _overlap(a, b), (where, a, b)
    assert len(set(y_labels)) == len(y_labels) >= 2, (where, y_labels)
    assert len(set(x_labels)) == len(x_labels) >= 3, (where, x_labels)
    # The y axis reaches the busiest minute; the times are clock times (UTC, as the legend says)
    assert max(int(v) for v in y_labels) >= max(peak, 1), (where, y_labels)
    assert all(re.fullmatch(r"\d\d:\d\d", v) for v in x_labels), (where, x_labels)


def test_the_throughput_chart_reads_right_at_three_widths_in_one_labelled_time_zone(
    local_gateway, browser, tmp_path
):
    from playwright.sync_api import expect

    from payloadstore import Client
    from payloadstore.dashboard import ClientBackend, Dashboard

    # An hour from a whole half hour: its first minute is a label's place, beside the y axis's "0"
    start = (int(time.time()) // 1800) * 1800 - 3600
    busy = [0] * 60
    busy[41], busy[55] = 1004, 17
    failed = [0] * 60
    failed[41] = 3
    charts = {
        "empty": {"queue": None, "start": start, "succeeded": [0] * 60, "failed": [0] * 60},
        "busy": {"queue": None, "start": start, "succeeded": busy, "failed": failed},
    }

    class Figures(ClientBackend):
        """The namespace's real queues and jobs; the chart's figures as set by the test (a
        minute of 1,007 ended jobs would take minutes to make on the local stack)."""

        shown = "empty"

        def throughput(self, queue):
            return dict(charts[self.shown])

    client = Client(local_gateway.url, local_gateway.token("dev", "client"), "dev")
    backend = Figures(client)
    shots = Path(os.environ.get(SCREENSHOT_ENV) or tmp_path / "dashboard.png")
    with Dashboard(backend, "127.0.0.1", 0, refresh_s=60.0) as dashboard:
        dashboard.start()
        for name, figures in charts.items():
            backend.shown = name
            peak = max(s + f for s, f in zip(figures["succeeded"], figures["failed"], strict=True))
            for width in CHART_WIDTHS:
                # Given the dashboard open in a window this wide
                page = browser.new_page(viewport={"width": width, "height": 1000})
                errors: list[str] = []
                page.on("pageerror", lambda e, errors=errors: errors.append(str(e)))
                page.goto(dashboard.url)
                # When the chart is drawn
                expect(page.locator("#throughput-succeeded")).to_have_text(
                    str(sum(figures["succeeded"]))
                )
                expect(page.locator("#throughput-chart text").first).to_be_attached()
                # Then its labels are whole, apart and each once; times are labelled UTC, and so
                # is the page's "updated" time
                where = f"{name} chart at {width} px"
                _assert_labels_read_right(page.evaluate(_LABEL_BOXES), peak, where)
                expect(page.locator("#throughput-panel .legend")).to_contain_text("UTC")
                updated = page.locator("#refreshed")
                expect(updated).to_have_text(re.compile(r"^updated \d\d:\d\d:\d\d UTC$"))
                # ... whole on the page, not cut at its edge
                box = updated.bounding_box()
                assert box and box["x"] >= 0 and box["x"] + box["width"] <= width, (where, box)
                title = page.locator("#throughput-chart g[data-minute='41'] title")
                expect(title).to_have_text(re.compile(r"^\d\d:\d\d UTC: "))
                page.locator("#throughput-panel").screenshot(
                    path=str(shots.with_name(f"{shots.stem}-chart-{name}-{width}.png"))
                )
                if name == "busy":
                    page.screenshot(path=str(shots.with_name(f"{shots.stem}-page-{width}.png")))
                assert errors == [], where
                page.close()
    client.close()
