"""The control plane's command packer (store/redis_client.SizedPacker) sends exactly what
redis-py's Python packer sends, and raises what it raises: hiredis packs small commands, and
large values still go as buffers of their own (no copy)."""

from __future__ import annotations

import pytest
from redis._parsers.encoders import Encoder
from redis.connection import PythonRespSerializer
from redis.exceptions import DataError

from payloadstore_controlplane.store.redis_client import SizedPacker

CUTOFF = 6000
python = PythonRespSerializer(CUTOFF, Encoder("utf-8", "strict", False).encode)
sized = SizedPacker(python, CUTOFF)

COMMANDS = {
    "a small script call": (
        "EVALSHA",
        "a" * 40,
        2,
        "ps:{dev}:q:default",
        "ps:{dev}:queues",
        b"\x00\xff" * 512,
        1_700_000_000_000,
        -5,
        "é",
        "",
        b"",
    ),
    "a name of two words": ("CONFIG GET", "maxmemory"),
    "a name of two words as bytes": (b"CONFIG GET", "maxmemory"),
    "a large value": ("XADD", "s", "*", "b", b"x" * 300_000),
    "a value just over the cutoff": ("SET", "k", "y" * (CUTOFF + 1)),
    "a float": ("ZADD", "z", 1.5, "m"),
    "a memoryview": ("SET", "k", memoryview(b"abc")),
    "a bytearray": ("SET", "k", bytearray(b"abc")),
    "a big int": ("SET", "k", 2**70),
}


def wire(chunks) -> bytes:
    return b"".join(bytes(c) for c in chunks)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_given_a_command_when_packed_then_the_bytes_are_redis_pys(name):
    # Given a command
    args = COMMANDS[name]
    # When packed by the sized packer and by redis-py's packer
    # Then the same bytes go on the wire
    assert wire(sized.pack(*args)) == wire(python.pack(*args))


def test_given_a_large_value_when_packed_then_it_is_its_own_buffer_not_a_copy():
    # Given a 300 KB value
    value = b"x" * 300_000
    # When packed
    chunks = sized.pack("XADD", "s", "*", "b", value)
    # Then the value is sent as it is (redis-py's way), not copied into one buffer
    assert any(c is value for c in chunks)


def test_given_a_small_command_when_packed_then_it_is_one_buffer():
    # Given a small command
    # When packed
    chunks = sized.pack("HSET", "k", "f", b"v" * 1024)
    # Then one buffer (hiredis's)
    assert len(chunks) == 1


@pytest.mark.parametrize("bad", [True, None, 1j], ids=["bool", "None", "complex"])
def test_given_a_value_redis_py_refuses_when_packed_then_the_same_error(bad):
    # Given a value of a type redis-py refuses
    # When packed
    # Then the same DataError as redis-py's packer
    with pytest.raises(DataError) as ours:
        sized.pack("SET", "k", bad)
    with pytest.raises(DataError) as theirs:
        python.pack("SET", "k", bad)
    assert str(ours.value) == str(theirs.value)


def test_given_a_string_that_is_not_utf8_when_packed_then_the_same_error():
    # Given a lone surrogate
    # When packed, Then both packers raise the same encoding error
    with pytest.raises(UnicodeEncodeError):
        sized.pack("SET", "k", "\ud800")
    with pytest.raises(UnicodeEncodeError):
        python.pack("SET", "k", "\ud800")
