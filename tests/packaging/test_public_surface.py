"""The SDK's public surface does not change by accident (issue 47: a refactor of the sync and
async clients onto one core keeps every name and signature users call)."""

from __future__ import annotations

import difflib
from pathlib import Path

from tests.support.public_surface import listing

RECORDED = Path(__file__).with_name("public_surface.txt")


def test_given_the_recorded_listing_when_the_sdk_is_imported_then_every_public_name_and_signature_is_the_same():
    # Given: the surface users were promised (payloadstore.__all__, payloadstore.aio.__all__)
    recorded = RECORDED.read_text()
    # When
    current = listing()
    # Then
    diff = "".join(
        difflib.unified_diff(
            recorded.splitlines(keepends=True),
            current.splitlines(keepends=True),
            "recorded",
            "current",
        )
    )
    assert not diff, (
        "the SDK's public surface changed; if that is meant, record it "
        "(python -m tests.support.public_surface > tests/packaging/public_surface.txt):\n" + diff
    )


def test_given_the_listing_then_it_covers_every_exported_name_with_a_signature():
    # A listing that silently lost names or signatures would make the comparison above vacuous
    import payloadstore
    import payloadstore.aio

    text = listing()
    for name in payloadstore.__all__:
        assert f"payloadstore.{name}" in text, name
    for name in payloadstore.aio.__all__:
        assert f"payloadstore.aio.{name}" in text, name
    assert "async def result(self, timeout: 'float | None' = None" in text
    assert "def result(self, timeout: 'float | None' = None" in text
