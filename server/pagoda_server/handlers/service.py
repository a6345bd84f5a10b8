"""GET /v1/models, /health, /version and /metrics."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST

import pagoda
import pagoda_server
from pagoda_server.errors import as_api_error, error_response
from pagoda_server.state import ServerState, server_state

router = APIRouter()


def _card(state: ServerState, name: str) -> dict[str, Any]:
    """A model entry: the OpenAI fields plus Pagoda's `max_model_len` and `vocab_size`; a
    LoRA adapter's also names its base model (`parent`) and its directory (`root`)."""
    card = {"id": name, "object": "model", "created": state.created, "owned_by": "pagoda",
            "max_model_len": state.engine.max_model_len,
            "vocab_size": state.engine.vocab_size}
    lora = state.lora_request(name)
    if lora is not None:
        card |= {"parent": state.engine.served_model_names[0], "root": lora.lora_path}
    return card


@router.get("/v1/models")
async def list_models(request: Request) -> Response:
    state = server_state(request)
    return JSONResponse({"object": "list", "data": [
        _card(state, name) for name in [*state.engine.served_model_names, *state.loras]]})


@router.get("/v1/models/{model:path}")
async def retrieve_model(model: str, request: Request) -> Response:
    state = server_state(request)
    return JSONResponse(_card(state, state.model_name(model)))


@router.get("/health")
async def health(request: Request) -> Response:
    """200 while new requests are taken (`restarting`: the cores being replaced while
    others serve); 503 `engine_dead`, or `engine_restarting` with Retry-After while every
    core is being replaced."""
    engine = server_state(request).engine
    unavailable = engine.supervisor.unavailable()
    if unavailable is not None:
        return error_response(as_api_error(unavailable), request.url.path)
    restarting = engine.supervisor.restarting_cores
    return JSONResponse({"status": "ok", **({"restarting": restarting} if restarting else {})})


@router.get("/version")
async def version() -> Response:
    return JSONResponse({"version": pagoda_server.__version__, "pagoda": pagoda.__version__})


@router.get("/metrics")
async def metrics(request: Request) -> Response:
    return Response(await server_state(request).metrics.render(), media_type=CONTENT_TYPE_LATEST)
