"""What every handler needs: the engine and the server's metrics."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from fastapi import Request

from pagoda.frontend.async_llm import AsyncLLM
from pagoda_server.conversation import ChatFormat
from pagoda_server.errors import APIError
from pagoda_server.metrics import ServerMetrics


@dataclass
class ServerState:
    engine: AsyncLLM
    metrics: ServerMetrics
    chat: ChatFormat
    created: int = field(default_factory=lambda: int(time.time()))

    def model_name(self, requested: str | None) -> str:
        """The served name a request asked for (the default when it named none); 404 for
        a model this server does not serve."""
        names = self.engine.served_model_names
        if requested is None:
            return names[0]
        if requested not in names:
            raise APIError(404, f"the model {requested!r} does not exist; this server serves "
                                f"{', '.join(repr(n) for n in names)}",
                           param="model", code="model_not_found")
        return requested


def server_state(request: Request) -> ServerState:
    return request.app.state.pagoda
