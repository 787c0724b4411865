"""The text of `payloadstore queues` and `payloadstore top` (rendering only; e2e runs the CLI)."""

from __future__ import annotations

import io

from payloadstore._top import format_age, queue_table, run_top, sparkline


def test_sparkline_scales_to_the_largest_value():
    assert sparkline([0, 4, 8]) == "▁▅█"
    assert sparkline([0, 0]) == "▁▁"
    assert sparkline([]) == ""


def test_ages_read_as_a_person_would_say_them():
    assert format_age(None) == "-"
    assert format_age(5.4) == "5s"
    assert format_age(125) == "2m05s"
    assert format_age(2 * 3600 + 5 * 60) == "2h05m"


def test_ages_floor_as_a_clock_reads_them():
    # Given ages just below a unit's boundary, When shown, Then they floor (issue 46: 100 s
    # read 2m40s, 5,400 s 2h30m and 7,199 s 2h60m).
    assert format_age(59.9) == "59s"
    assert format_age(100) == "1m40s"
    assert format_age(3599.5) == "59m59s"
    assert format_age(5400) == "1h30m"
    assert format_age(7199) == "1h59m"
    assert format_age(-0.2) == "0s"


def test_table_aligns_numbers_right_and_names_left():
    text = queue_table(
        [
            {
                "name": "resize",
                "queued": 12,
                "in_flight": 3,
                "oldest_queued_age_s": 75,
                "failed": 4,
            },
            {"name": "a", "queued": 0, "in_flight": 0, "oldest_queued_age_s": None},
        ]
    )
    header, first, second = text.splitlines()
    assert header.startswith("QUEUE ") and "IN FLIGHT  FAILED" in header
    assert first.split() == ["resize", "12", "3", "4", "1m15s"]
    assert second.split() == ["a", "0", "0", "0", "-"]
    assert header.index("FAILED") + len("FAILED") == first.index("4  ") + 1
    assert header.index("QUEUED") + len("QUEUED") == first.index("12") + 2


def test_top_draws_frames_with_a_trend_and_restores_the_terminal():
    depths = iter([0, 4, 8])
    out = io.StringIO()
    frames = run_top(
        lambda: [{"name": "q", "queued": next(depths), "in_flight": 0, "oldest_queued_age_s": 1}],
        title="t",
        iterations=3,
        out=out,
        sleep=lambda s: None,
    )
    text = out.getvalue()
    assert frames == 3
    assert text.startswith("\x1b[?1049h") and text.endswith("\x1b[?25h\x1b[?1049l")
    assert "▁▅█" in text  # the depth trend after three samples


def test_a_failing_fetch_is_shown_and_the_view_goes_on():
    calls = []

    def fetch():
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("control plane unreachable")
        return []

    out = io.StringIO()
    run_top(fetch, title="t", iterations=2, out=out, sleep=lambda s: None)
    assert "error: control plane unreachable" in out.getvalue()
    assert "(no queues yet" in out.getvalue()
