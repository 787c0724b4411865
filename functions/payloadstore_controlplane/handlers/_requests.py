"""The request as bytes: its media type (the one Content-Type parser), the checks every body
passes before any handler runs (`precheck`: 415 for a media type the route does not take, 400
for JSON that does not parse), and the body as a handler reads it (`raw_body`, `json_body`)."""

from __future__ import annotations

import base64
import json
from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayRestResolver

from ..models.errors import BadRequest, Unprocessable
from ..routes import find_route

# What checked_body gives when it parsed no JSON (no body, another media type, a refusal).
NOT_PARSED = object()


def media_type(headers: dict | None) -> str:
    """`application/json; charset=utf-8` -> `application/json` ("" when absent)."""
    value = next((v for k, v in (headers or {}).items() if k.lower() == "content-type"), None)
    return (value or "").split(";", 1)[0].strip().lower()


# -- before any handler: content type and JSON syntax -------------------------------------------


def _event_body(event: dict) -> bytes:
    body = event.get("body") or ""
    if event.get("isBase64Encoded"):
        try:
            return base64.b64decode(body)
        except (ValueError, TypeError):
            return b"\x00"  # unparsable as JSON: refused below
    return body.encode("utf-8", errors="surrogatepass")


def precheck(event: dict) -> tuple[int, str, str] | None:
    """(status, code, message) when the request cannot reach its handler, else None.

    A body must come with one of the media types its route takes (415); a JSON body must be
    UTF-8 JSON that Python can hold (400: syntax, encoding, nesting past the recursion limit).
    Routes that read no body ignore one, as before."""
    return checked_body(event)[0]


def checked_body(event: dict) -> tuple[tuple[int, str, str] | None, Any]:
    """precheck's answer, and the JSON body it parsed to check it (NOT_PARSED if none): the
    handler reads that value instead of parsing the body again (json_body)."""
    route = find_route(str(event.get("httpMethod") or ""), str(event.get("resource") or ""))
    if route is None or not route.body:
        return None, NOT_PARSED
    data = _event_body(event)
    if not data.strip():
        return None, NOT_PARSED
    media = media_type(event.get("headers"))
    if media not in route.body:
        given = f"Content-Type {media}" if media else "no Content-Type"
        refusal = (415, "unsupported_media_type", f"{given}; send one of: {', '.join(route.body)}")
        return refusal, NOT_PARSED
    if media != "application/json":
        return None, NOT_PARSED
    try:
        return None, json.loads(data)
    except RecursionError:
        return (400, "malformed_body", "body is JSON nested too deeply"), NOT_PARSED
    except UnicodeDecodeError:
        return (400, "malformed_body", "body is not UTF-8"), NOT_PARSED
    except ValueError as e:
        return (400, "malformed_body", f"body is not valid JSON: {e}"), NOT_PARSED


# -- in a handler -------------------------------------------------------------------------------


def raw_body(app: APIGatewayRestResolver) -> bytes:
    event = app.current_event
    body = event.body or ""
    if event.is_base64_encoded:
        return base64.b64decode(body)
    return body.encode("utf-8")


def json_body(app: APIGatewayRestResolver) -> dict:
    value = getattr(app, "parsed_json", NOT_PARSED)  # parsed once already, by precheck
    if value is NOT_PARSED:
        data = raw_body(app)
        if not data.strip():
            return {}
        try:
            value = json.loads(data)
        except (ValueError, RecursionError) as e:  # normally refused earlier, by precheck (400)
            raise BadRequest("body is not valid JSON") from e
    if not isinstance(value, dict):
        raise Unprocessable("body must be a JSON object")
    return value


def idempotency_key(app: APIGatewayRestResolver) -> str | None:
    """The request's Idempotency-Key header (any case), or None."""
    headers = app.current_event.headers or {}
    for name, value in headers.items():
        if name.lower() == "idempotency-key":
            return value
    return None
