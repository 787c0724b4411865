"""A jobs:batch item is read as BatchJobIn reads it, whichever way the handler takes."""

from __future__ import annotations

import base64

import pytest
from pydantic import ValidationError

from payloadstore_controlplane.logic.batch import _parse_item
from payloadstore_controlplane.models.api import BatchJobIn

REF = {"kind": "s3", "bucket": "bkt", "key": "payloads/x/args", "size": 3}
ITEMS = [
    {"payloadInline": base64.b64encode(b"\x01\x02").decode()},
    {"payloadInline": base64.b64encode(b"\x01").decode(), "idempotency_key": "k-1"},
    {"payloadInline": "AQ==", "idempotency_key": None},
    {"payloadInline": ""},
    {"payloadInline": "not base64!"},
    {"payloadInline": "AQ"},
    {"payloadInline": "AQ==\n"},
    {"payloadInline": "AQ==", "idempotency_key": 7},
    {"payloadInline": 7},
    {"payloadInline": None},
    {"payloadInline": "AQ==", "extra": 1},
    {"payloadInline": "AQ==", "payloadRef": REF},
    {"payloadRef": REF},
    {"idempotency_key": "k"},
    {},
    [],
    "AQ==",
]


@pytest.mark.parametrize("item", ITEMS)
def test_an_item_is_read_as_the_model_reads_it(item):
    try:
        expected = BatchJobIn.model_validate(item)
    except ValidationError as e:
        with pytest.raises(ValidationError) as got:
            _parse_item(item)
        assert got.value.errors(include_context=False) == e.errors(include_context=False)
        return
    job, data = _parse_item(item)
    assert job.model_dump() == expected.model_dump()
    assert data == expected.inline_bytes()
