"""POST /score and /rerank (vLLM's API; rerank as Jina's and Cohere's), under /v1 too:
relevance scores of text pairs, from a cross-encoder or an embedding model's cosine
similarity."""

from __future__ import annotations

import time
import uuid

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from pagoda.pooling import score_pairs
from pagoda_server.errors import bad_request
from pagoda_server.pooling import score_texts
from pagoda_server.protocol.scoring import RerankRequest, ScoreRequest
from pagoda_server.state import server_state

router = APIRouter()


@router.post("/score")
@router.post("/v1/score")
async def score(body: ScoreRequest, request: Request) -> Response:
    state = server_state(request)
    model = state.model_name(body.model)
    try:
        pairs = score_pairs(body.text_1, body.text_2)
    except ValueError as exc:
        message = str(exc)
        raise bad_request(message, message.split(" ", 1)[0]) from None
    request_id = f"score-{uuid.uuid4().hex}"
    scores, tokens = await score_texts(state, request, pairs, request_id, "text_2")
    return JSONResponse({
        "id": request_id, "object": "list", "created": int(time.time()), "model": model,
        "data": [{"index": i, "object": "score", "score": s} for i, s in enumerate(scores)],
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens, "completion_tokens": 0},
    })


@router.post("/rerank")
@router.post("/v1/rerank")
async def rerank(body: RerankRequest, request: Request) -> Response:
    state = server_state(request)
    model = state.model_name(body.model)
    request_id = f"rerank-{uuid.uuid4().hex}"
    scores, tokens = await score_texts(state, request, score_pairs(body.query, body.documents),
                                       request_id, "documents")
    order = sorted(range(len(scores)), key=lambda i: -scores[i])[: body.top_n]
    results = [{"index": i, "relevance_score": scores[i],
                **({"document": {"text": body.documents[i]}} if body.return_documents else {})}
               for i in order]
    return JSONResponse({"id": request_id, "model": model, "results": results,
                         "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})
