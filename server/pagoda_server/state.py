"""What every handler needs: the engine and the server's metrics."""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field

from fastapi import Request

from pagoda.frontend.async_llm import AsyncLLM
from pagoda.lora.request import LoRARequest
from pagoda_server.conversation import ChatFormat
from pagoda_server.errors import APIError
from pagoda_server.metrics import ServerMetrics


@dataclass
class ServerState:
    engine: AsyncLLM
    metrics: ServerMetrics
    chat: ChatFormat
    request_timeout: float | None = None
    """Seconds a generation or embedding request may take (`ServerConfig.request_timeout`)."""
    created: int = field(default_factory=lambda: int(time.time()))
    loras: dict[str, LoRARequest] = field(default_factory=dict)
    """The LoRA adapters served, by name (the model field that asks for one)."""
    _lora_ids: itertools.count = field(default_factory=lambda: itertools.count(1))

    async def add_lora(self, name: str, path: str) -> LoRARequest:
        """Serve the adapter at `path` as model `name`: a 400 for a name in use, ValueError
        naming what is wrong with the adapter (or that LoRA is off)."""
        if name in self.loras or name in self.engine.served_model_names:
            raise APIError(400, f"lora_name: the model name {name!r} is already in use",
                           param="lora_name")
        lora = LoRARequest(name, next(self._lora_ids), path)
        await self.engine.add_lora_adapter(lora)
        self.loras[name] = lora
        return lora

    async def remove_lora(self, name: str) -> None:
        """Stop serving adapter `name`; 404 if it is not served."""
        lora = self.loras.pop(name, None)
        if lora is None:
            raise APIError(404, f"the LoRA adapter {name!r} is not loaded",
                           param="lora_name", code="model_not_found")
        await self.engine.remove_lora_adapter(lora.lora_int_id)

    def lora_request(self, model: str) -> LoRARequest | None:
        """The adapter that served name `model` (from `model_name`) is, if any."""
        return self.loras.get(model)

    def model_name(self, requested: str | None) -> str:
        """The served name a request asked for (the default when it named none), a LoRA
        adapter's name included; 404 for a model this server does not serve."""
        names = self.engine.served_model_names
        if requested is None:
            return names[0]
        if requested in self.loras:
            return requested
        if requested not in names:
            raise APIError(404, f"the model {requested!r} does not exist; this server serves "
                                f"{', '.join(repr(n) for n in names)}",
                           param="model", code="model_not_found")
        return requested


def server_state(request: Request) -> ServerState:
    return request.app.state.pagoda
