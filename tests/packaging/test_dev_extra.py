"""`payloadstore dev` from a bare SDK install: one line naming the extra, not a traceback."""

from __future__ import annotations

import importlib.util

from click.testing import CliRunner

from payloadstore.cli import cli


def test_dev_without_the_stack_extra_names_it_and_exits_2(monkeypatch):
    # Given an install without moto (the bare wheel: SDK and CLI only)
    real_find_spec = importlib.util.find_spec

    def find_spec(name, *args):
        return None if name == "moto" else real_find_spec(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    # When `payloadstore dev` runs
    result = CliRunner().invoke(cli, ["dev", "--port", "1"])
    # Then it says which extra to install, naming what is missing, and starts nothing
    assert result.exit_code == 2
    assert "pip install 'payloadstore[stack]'" in result.output
    assert "missing: moto" in result.output
