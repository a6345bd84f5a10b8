"""POST /v1/embeddings (OpenAI)."""

from __future__ import annotations

import base64
import struct
import uuid

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from pagoda.pooling_params import PoolingParams
from pagoda_server.errors import bad_request
from pagoda_server.pooling import encode_all, prompt_tokens, served_pooler, values
from pagoda_server.protocol.embeddings import EmbeddingRequest
from pagoda_server.state import server_state

router = APIRouter()


def _encoded(embedding: list[float], encoding_format: str) -> list[float] | str:
    """The embedding as a JSON list, or base64 of its little-endian float32 bytes."""
    if encoding_format == "float":
        return embedding
    return base64.b64encode(struct.pack(f"<{len(embedding)}f", *embedding)).decode()


@router.post("/v1/embeddings")
async def create_embeddings(body: EmbeddingRequest, request: Request) -> Response:
    state = server_state(request)
    model = state.model_name(body.model)
    served_pooler(state, "embed")
    try:
        params = PoolingParams(dimensions=body.dimensions)
    except ValueError as exc:
        raise bad_request(str(exc), "dimensions") from None
    outputs = await encode_all(state, request, body.inputs(), params,
                               f"embd-{uuid.uuid4().hex}", "input")
    data = [{"object": "embedding", "index": i,
             "embedding": _encoded(values(o), body.encoding_format)}
            for i, o in enumerate(outputs)]
    tokens = prompt_tokens(outputs)
    return JSONResponse({"object": "list", "data": data, "model": model,
                         "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})
