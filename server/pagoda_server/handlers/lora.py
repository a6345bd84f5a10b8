"""POST /v1/load_lora_adapter and /v1/unload_lora_adapter: LoRA adapters served from now
on, or no longer, under a model name (behind the API key like every non-public route)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from pagoda_server.errors import bad_request
from pagoda_server.protocol.common import RequestModel
from pagoda_server.state import server_state

router = APIRouter()


class LoadLoRAAdapterRequest(RequestModel):
    lora_name: str
    lora_path: str


class UnloadLoRAAdapterRequest(RequestModel):
    lora_name: str


@router.post("/v1/load_lora_adapter")
async def load_lora_adapter(body: LoadLoRAAdapterRequest, request: Request) -> Response:
    """The adapter is checked (files, rank, shapes against the base model) before it is
    served: a bad one is a 400 naming the problem, and changes nothing."""
    state = server_state(request)
    try:
        lora = await state.add_lora(body.lora_name, body.lora_path)
    except ValueError as exc:
        raise bad_request(str(exc), "lora_path") from None
    return JSONResponse({"lora_name": lora.lora_name, "lora_int_id": lora.lora_int_id,
                         "lora_path": lora.lora_path})


@router.post("/v1/unload_lora_adapter")
async def unload_lora_adapter(body: UnloadLoRAAdapterRequest, request: Request) -> Response:
    """Requests already running with the adapter finish with it; new ones cannot name it."""
    await server_state(request).remove_lora(body.lora_name)
    return JSONResponse({"lora_name": body.lora_name, "unloaded": True})
