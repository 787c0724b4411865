"""The docs' tables are checked against the code they describe, so they cannot drift.

- docs/wire.md "Route table": one row per `routes.ROUTES` entry (method, path, function, roles),
  and the detailed route table above it names exactly the same routes;
- docs/design.md "Lambda functions and handler strings": one row per `routes.FUNCTIONS` entry;
- docs/settings.md: one row per `SETTINGS_ENV` variable, with the model's default.

How to add a row is in each page, next to its table.
"""

from __future__ import annotations

import re
from pathlib import Path

from payloadstore_controlplane.models.settings import SETTINGS_ENV, Settings
from payloadstore_controlplane.routes import FUNCTIONS, ROUTES

DOCS = Path(__file__).resolve().parents[2] / "docs"
PUBLIC = "—"


def section(page: str, heading: str) -> str:
    """The text of `## heading` (up to the next heading of level 1 or 2) in docs/<page>."""
    text = (DOCS / page).read_text()
    match = re.search(
        rf"^#+ {re.escape(heading)}\s*$(.*?)(?=^#{{1,2}} |\Z)", text, re.MULTILINE | re.DOTALL
    )
    assert match, f"docs/{page} has no heading {heading!r}"
    return match.group(1)


def table_rows(text: str) -> list[list[str]]:
    """The body rows of the first markdown table in `text`, as stripped cells."""
    rows, in_table = [], False
    for line in text.splitlines():
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
            if in_table and not set(line) <= set("|-: "):
                rows.append(cells)
            in_table = True
        elif in_table:
            break
    assert rows, "no table found"
    return rows


def code(cell: str) -> str:
    match = re.fullmatch(r"`([^`]+)`", cell)
    assert match, f"expected one `code` span, got {cell!r}"
    return match.group(1)


def test_the_route_table_lists_every_route_of_routes_py_with_its_function_and_roles():
    # Given the route table of docs/wire.md
    rows = table_rows(section("wire.md", "Route table"))
    # When it is read as (method, path, function, roles)
    documented = {
        (code(method), code(path), function, tuple(r.strip() for r in roles.split(",")))
        for method, path, function, roles in rows
    }
    # Then it is exactly routes.ROUTES
    actual = {(r.method, r.path, r.function, r.roles or (PUBLIC,)) for r in ROUTES}
    assert documented == actual, (
        f"docs/wire.md route table drifted: missing {sorted(actual - documented)}, "
        f"stale {sorted(documented - actual)}"
    )
    assert len(rows) == len(ROUTES), "a route is listed twice"


def test_the_detailed_wire_table_names_the_same_routes():
    # Given the detailed table of docs/wire.md (first cell: `METHOD /path[?query]`, maybe a variant)
    rows = table_rows(section("wire.md", "The wire (v1)"))
    documented = set()
    for row in rows:
        method, path = re.match(r"`(\S+) (\S+)`", row[0]).groups()
        documented.add((method, path.split("?", 1)[0]))  # `…/result?wait=S`: a query may follow
    # Then every route has at least one row there, and no row names a route that does not exist
    actual = {(r.method, r.path) for r in ROUTES}
    assert documented == actual, (
        f"docs/wire.md detailed table: missing {sorted(actual - documented)}, "
        f"stale {sorted(documented - actual)}"
    )


def test_the_function_table_lists_every_handler_string():
    rows = table_rows(section("design.md", "Lambda functions and handler strings"))
    documented = {function: code(handler) for function, handler, *_ in rows}
    assert documented == FUNCTIONS


def documented_default(value: object) -> str | None:
    """How the settings table writes a default (None: not a literal, e.g. required or derived)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if hasattr(value, "value"):  # an enum
        return str(value.value)
    return str(value)


def test_the_settings_table_lists_every_setting_with_its_default():
    # Given the table of docs/settings.md
    rows = table_rows(section("settings.md", "Settings"))
    documented = {code(name): default for name, default, _meaning in rows}
    # Then it names exactly the variables of SETTINGS_ENV
    actual = set(SETTINGS_ENV.values())
    assert set(documented) == actual, (
        f"docs/settings.md drifted: missing {sorted(actual - set(documented))}, "
        f"stale {sorted(set(documented) - actual)}"
    )
    assert len(rows) == len(actual), "a setting is listed twice"
    # And each default is the model's: `value` for a literal, `—` or `= ...` when there is none
    for field, env_name in SETTINGS_ENV.items():
        info = Settings.model_fields[field]
        cell = documented[env_name]
        want = None if info.is_required() else documented_default(info.default)
        if want is None:
            assert cell.startswith(("—", "=")), f"{env_name}: no literal default, doc says {cell}"
        else:
            assert cell == f"`{want}`", f"{env_name}: default is {want}, doc says {cell}"
