"""Presign: presigned PUT (args/result) and GET URLs of payloads; blobs (create, verify)."""

from __future__ import annotations

from .. import routes
from ..logic.blobs import ensure_blob
from ..logic.context import Principal
from ..logic.presign import presign_get, presign_put
from ..models.api import (
    BlobRequest,
    BlobResponse,
    PresignGetResponse,
    PresignPutResponse,
    PresignRequest,
)
from ..observability import lambda_entry
from ._deps import get_deps
from ._requests import json_body
from ._resolver import new_resolver
from ._routing import route


def register(app) -> None:
    @route(app, routes.PRESIGN, summary="Presign a PUT (op=put) or GET (op=get) of a payload")
    def presign(p: Principal, ns: str) -> PresignPutResponse | PresignGetResponse:
        # Query parameters and a JSON body are both accepted; the query wins.
        merged = {**json_body(app), **(app.current_event.query_string_parameters or {})}
        req = PresignRequest.model_validate(merged)
        if req.op == "put":
            return presign_put(p, req, get_deps())
        return presign_get(p, req, get_deps())

    @route(
        app,
        routes.BLOBS,
        summary="A blob {sha256, size}: exists (verified) or where to upload it; POST again "
        "after the upload to have it verified",
    )
    def blob(p: Principal, ns: str) -> BlobResponse:
        req = BlobRequest.model_validate(json_body(app))
        return ensure_blob(p, req, get_deps())


app = new_resolver()
register(app)


@lambda_entry
def lambda_handler(event, context):
    return app.resolve(event, context)
