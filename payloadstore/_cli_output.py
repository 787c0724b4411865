"""What the command line prints: one `error:` line and its exit code for a failure, and a
job's value (bytes raw, anything else as strict JSON by the CLI's documented rule)."""

from __future__ import annotations

import json
import math
import sys
from typing import Any

import click

from ._blobs import Blob
from ._payloads import write_into
from .codec import CodecError
from .errors import JobFailed


def refuse_value(error: CodecError) -> None:
    """A value the codec refuses (an integer past 64 bits, ...): nothing was enqueued; exit 2."""
    click.echo(f"error: {error}; nothing was enqueued", err=True)
    sys.exit(2)


def fail(error: BaseException, verbose: bool = False) -> None:
    """Print one line (plus the remote traceback when verbose) and exit with the error's code."""
    if isinstance(error, JobFailed):
        click.echo(f"error: job {error.job_id} failed: {error.type}: {error.message}", err=True)
        if error.traceback:
            if verbose:
                click.echo(error.traceback.rstrip(), err=True)
            else:
                click.echo("  (run with -v for the remote traceback)", err=True)
    else:
        message = getattr(error, "message", None) or str(error)
        click.echo(
            f"error: {message.splitlines()[0] if message else type(error).__name__}", err=True
        )
    sys.exit(getattr(error, "exit_code", 1))


def json_default(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"bytes": len(value)}
    if isinstance(value, Blob):
        return {"blob": value.sha256, "size": value.size}
    tolist = getattr(value, "tolist", None)
    if callable(tolist):
        return tolist()
    if isinstance(value, (set, frozenset)):
        return sorted(value, key=repr)
    return repr(value)


def json_safe(value: Any) -> Any:
    """A value JSON can hold, by the CLI's documented rule: NaN and the infinities as the strings
    "NaN", "Infinity", "-Infinity"; map keys as strings (bool and None as JSON writes them,
    numbers in their JSON form, bytes as their UTF-8 text or else `0x` + hex, anything else its
    repr; a key that would repeat one already there is its repr, and if that repeats one too,
    `<type>:<repr>`); bytes as `{"bytes": N}`,
    arrays as lists, other types as `json_default` has them."""
    if isinstance(value, float):
        if math.isfinite(value):
            return float(value)
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if value is None or type(value) in (str, bool, int):
        return value
    if isinstance(value, (str, bool, int)):
        return json_safe_scalar(value)
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            out[unique_key(out, k)] = json_safe(v)
        return out
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    converted = json_default(value)
    return converted if isinstance(converted, str) else json_safe(converted)


def unique_key(out: dict[str, Any], k: Any) -> str:
    """`k`'s JSON key, else (that one is taken) its repr, else (repr alike too: 1 after "1",
    1.5 after "1.5") `<type>:<repr>`, then a count: no entry printed over another."""
    for key in (json_key(k), repr(k)):
        if key not in out:
            return key
    key = base = f"{type(k).__name__}:{k!r}"
    n = 1
    while key in out:
        n += 1
        key = f"{base}#{n}"
    return key


def json_safe_scalar(value: Any) -> Any:
    """A subclass of str, int or bool (an enum, say) as its plain value."""
    for plain in (bool, int, str):
        if isinstance(value, plain):
            return plain(value)
    return value


def json_key(key: Any) -> str:
    if isinstance(key, str):
        return str(key)
    if key is None or isinstance(key, bool):
        return json.dumps(key)
    if isinstance(key, (int, float)):
        safe = json_safe(key)
        return safe if isinstance(safe, str) else json.dumps(safe)
    if isinstance(key, (bytes, bytearray, memoryview)):
        raw = bytes(key)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return "0x" + raw.hex()
    return repr(key)


def dumps_json(value: Any) -> str:
    """Strict JSON (no NaN, no non-string keys), whatever the value: see `json_safe`."""
    return json.dumps(json_safe(value), ensure_ascii=False, allow_nan=False)


def emit_value(value: Any, out: str | None) -> None:
    """bytes go out raw (to --out or stdout); anything else as JSON."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        data = bytes(value)
        if out:
            # Beside it, then renamed over it: a failed write leaves the old file whole.
            write_into(out, data)
        else:
            sys.stdout.buffer.write(data)
            sys.stdout.flush()
        return
    text = dumps_json(value)
    if out:
        write_into(out, (text + "\n").encode())
    else:
        click.echo(text)
