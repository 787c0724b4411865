"""Presign: presigned PUT (args/result) and GET URLs of payloads, the part URLs of a
multipart upload; blobs (create, verify)."""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler.openapi.params import Body

from .. import routes
from ..logic.blobs import ensure_blob, presign_blob_parts
from ..logic.context import Principal
from ..logic.presign import presign_get, presign_parts, presign_put
from ..models.api import (
    BlobRequest,
    BlobResponse,
    PartsRequest,
    PartsResponse,
    PresignGetResponse,
    PresignPutResponse,
    PresignRequest,
)
from ..observability import lambda_entry
from ._deps import get_deps
from ._requests import json_body
from ._resolver import new_resolver
from ._responses import json_response
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

    @route(
        app,
        routes.PARTS,
        summary="Presigned UploadPart URLs (size and sha256 signed in) for up to 100 parts of a "
        "multipart upload: a job's payload (job_id) or a blob (blob)",
    )
    def parts(p: Principal, ns: str, body: Annotated[PartsRequest, Body()]) -> PartsResponse:
        if body.blob is not None:
            return json_response(200, presign_blob_parts(p, body, get_deps()))
        return json_response(200, presign_parts(p, body, get_deps()))


app = new_resolver()
register(app)


@lambda_entry
def lambda_handler(event, context):
    return app.resolve(event, context)
