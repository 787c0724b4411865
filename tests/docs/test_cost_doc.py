"""docs/cost.md is what `make cost` writes: it ends with the cost line, its price table is the
one in tools/cost/prices.py, and it prices the functions' memory as infra/config.py sets it."""

from __future__ import annotations

import re
from pathlib import Path

from infra.config import FUNCTION_TUNING
from tools.cost.prices import PRICES, READ

DOC = Path(__file__).resolve().parents[2] / "docs" / "cost.md"
LINE = re.compile(
    r"cost: idle daemon \(concurrency 8\) \$(?P<idle>[\d.]+)/month, 1M inline jobs \$[\d.]+, "
    r"1M 100 MiB jobs \$[\d.]+, fixed dev \$(?P<dev>[\d.]+)/month, fixed prod \$[\d.]+/month"
    # issue 35: the same jobs in a namespace with retention consume, at most $90
    r", 1M 100 MiB jobs under consume \$(?P<consume>[\d.]+)"
    # issue 44: a busy daemon's leases long-poll (cancel within seconds), per hour
    r", busy daemon \$(?P<busy>[\d.]+)/hour"
)


def test_cost_doc_ends_with_the_cost_line_and_the_idle_daemon_meets_its_goal():
    lines = DOC.read_text().strip().splitlines()
    match = LINE.fullmatch(lines[-1])
    assert match, lines[-1]
    # The goal of issue 23: an idle daemon with concurrency 8 costs at most $8 a month
    assert float(match["idle"]) <= 8
    # The goal of issue 35: 1 M 100 MiB jobs under retention consume cost at most $90
    assert float(match["consume"]) <= 90
    # The goal of issue 45: a dev stage's fixed month at most $12
    assert float(match["dev"]) <= 12


def test_cost_doc_is_current_with_the_prices_and_the_memory():
    text = DOC.read_text()
    assert f"recorded {READ}" in text
    for name, price in PRICES.items():
        assert f"| {name} | {price.usd:.10g} | {price.unit} | {price.source} |" in text, name
    for group in ("daemon", "jobs"):
        assert f"| {group} | {FUNCTION_TUNING[group].memory_mb} | x86_64 |" in text, group


def test_an_inline_job_costs_at_most_2_calls_and_1m_of_them_at_most_10_dollars():
    # The goals of issue 34, from the table and the summary `make cost` writes
    text = DOC.read_text()
    calls = re.search(r"\| \*\*all calls\*\* \| \*\*(?P<inline>[\d.]+)\*\* \|", text)
    assert calls, "no calls-per-job table"
    assert float(calls["inline"]) <= 2
    inline = re.search(r"1M inline jobs \$(?P<usd>[\d.]+)", text.strip().splitlines()[-1])
    assert inline and float(inline["usd"]) <= 10
