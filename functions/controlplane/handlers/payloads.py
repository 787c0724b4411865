"""POST /v1/namespaces/{ns}/payloads/presign — presigned PUT (args/result) and GET URLs."""

from __future__ import annotations

from ..logic.presign import presign_get, presign_put
from ..models.wire import PresignGetResponse, PresignPutResponse, PresignRequest
from ..observability import lambda_entry
from ._common import get_deps, json_body, new_resolver, principal, roles_for

PRESIGN = "/v1/namespaces/<ns>/payloads/presign"


def register(app) -> None:
    roles = roles_for("POST", PRESIGN)

    @app.post(PRESIGN, summary="Presign a PUT (op=put) or GET (op=get) of a payload")
    def presign(ns: str) -> PresignPutResponse | PresignGetResponse:
        p = principal(app, roles, ns)
        # Query parameters and a JSON body are both accepted; the query wins.
        merged = {**json_body(app), **(app.current_event.query_string_parameters or {})}
        req = PresignRequest.model_validate(merged)
        if req.op == "put":
            return presign_put(p, req, get_deps())
        return presign_get(p, req, get_deps())


app = new_resolver()
register(app)


@lambda_entry
def lambda_handler(event, context):
    return app.resolve(event, context)
