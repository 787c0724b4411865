"""The answers handlers give: JSON bodies (validated by Powertools, or serialized here), the
error body `{"error": {"code", "message", ...}}`, an empty answer, and the raw proxy answer of
a request refused before Powertools runs."""

from __future__ import annotations

import json

from aws_lambda_powertools.event_handler import Response


def error_response(
    status: int, code: str, message: str, headers: dict | None = None, **details
) -> Response:
    body = {"error": {"code": code, "message": message, **details}}
    return Response(
        status_code=status,
        content_type="application/json",
        body=json.dumps(body, default=str),
        headers=headers or {},
    )


def json_response(status: int, model, headers: dict | None = None) -> Response:
    """The model goes through Powertools' response validation and serialization."""
    return Response(
        status_code=status, content_type="application/json", body=model, headers=headers or {}
    )


def json_text_response(status: int, model) -> Response:
    """The model serialized here, once, for a route whose answer Powertools does not validate
    (it declares no return type, e.g. poll: 200 or an empty 204): a JSON string passes through
    as it is, where a model would go through Powertools' generic (and slower) encoder."""
    return Response(
        status_code=status, content_type="application/json", body=model.model_dump_json()
    )


def empty_response(status: int = 204) -> Response:
    # No content type: Powertools' response validation passes non-JSON responses through as is.
    return Response(status_code=status, content_type=None, body="")


def proxy_error(status: int, code: str, message: str) -> dict:
    """The error body as an API Gateway proxy answer, for a request refused before routing."""
    return {
        "statusCode": status,
        "multiValueHeaders": {"Content-Type": ["application/json"]},
        "body": json.dumps({"error": {"code": code, "message": message}}),
        "isBase64Encoded": False,
    }
