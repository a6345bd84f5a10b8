"""POST /tokenize and /detokenize."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from pagoda_server.errors import bad_request
from pagoda_server.protocol.tokens import DetokenizeRequest, TokenizeRequest
from pagoda_server.state import server_state

router = APIRouter()


@router.post("/tokenize")
async def tokenize(body: TokenizeRequest, request: Request) -> Response:
    state = server_state(request)
    state.model_name(body.model)
    tokenizer = state.engine.tokenizer
    if body.messages is not None:
        tools = [t.function.tool() for t in body.tools or []]
        ids = state.chat.prompt([m.turn() for m in body.messages], tools,
                                add_generation_prompt=body.add_generation_prompt,
                                continue_final_message=body.continue_final_message,
                                template_kwargs=body.chat_template_kwargs).token_ids
    else:
        ids = tokenizer.encode(body.prompt, add_special_tokens=body.add_special_tokens)
    return JSONResponse({"count": len(ids), "max_model_len": state.engine.max_model_len,
                         "tokens": ids})


@router.post("/detokenize")
async def detokenize(body: DetokenizeRequest, request: Request) -> Response:
    state = server_state(request)
    state.model_name(body.model)
    vocab = state.engine.vocab_size
    bad = next((t for t in body.tokens if not 0 <= t < vocab), None)
    if bad is not None:
        raise bad_request(f"token id {bad} is out of range [0, {vocab})", "tokens")
    return JSONResponse({"prompt": state.engine.tokenizer.decode(body.tokens)})
