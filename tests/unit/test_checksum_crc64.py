"""CRC64NVME (the transfer checksum): combining per-part CRCs gives the whole buffer's CRC, so
parallel parts are checked against one full-object value; the wire form is S3's base64."""

from __future__ import annotations

import base64
import os
import random

import pytest

from payloadstore import _checksum


def test_known_values_match_s3s_form():
    # Given no bytes and the check string of CRC-64/NVME ("123456789" -> 0xAE8B14860A799888)
    # Then the CRC and its wire form are the ones S3 shows
    assert _checksum.to_b64(_checksum.of(b"")) == "AAAAAAAAAAA="
    assert _checksum.of(b"123456789") == 0xAE8B14860A799888
    assert base64.b64decode(_checksum.to_b64(0xAE8B14860A799888)).hex() == "ae8b14860a799888"


@pytest.mark.parametrize("pieces", [[0], [1, 1], [5, 0, 7], [1 << 16, 3, 1 << 20, 1]])
def test_combined_part_crcs_equal_the_whole_buffers(pieces):
    # Given a buffer cut into parts of these sizes (empty parts included)
    data = os.urandom(sum(pieces))
    parts, start = [], 0
    for n in pieces:
        parts.append(data[start : start + n])
        start += n
    # When each part's CRC is computed alone and the CRCs are combined in order
    combined = _checksum.combine_all([(_checksum.of(p), len(p)) for p in parts])
    # Then it is the whole buffer's CRC
    assert combined == _checksum.of(data)


def test_incremental_update_equals_one_pass():
    rng = random.Random(7)
    data = os.urandom(300_000)
    crc, at = 0, 0
    while at < len(data):
        step = rng.randint(1, 40_000)
        crc = _checksum.update(memoryview(data)[at : at + step], crc)
        at += step
    assert crc == _checksum.of(data)


def test_a_swapped_part_of_the_same_length_changes_the_crc():
    a, b = os.urandom(1000), os.urandom(1000)
    other = bytes(x ^ 1 for x in b)
    whole = _checksum.combine(_checksum.of(a), _checksum.of(b), len(b))
    swapped = _checksum.combine(_checksum.of(a), _checksum.of(other), len(other))
    assert whole != swapped


@pytest.mark.parametrize(
    "bad", ["", "AAAA", "not base64!", base64.b64encode(b"123456789").decode()]
)
def test_wire_form_refuses_anything_but_8_bytes(bad):
    with pytest.raises(ValueError):
        _checksum.from_b64(bad)


def test_wire_form_round_trips():
    for value in (0, 1, 2**64 - 1, 0xAE8B14860A799888):
        assert _checksum.from_b64(_checksum.to_b64(value)) == value
