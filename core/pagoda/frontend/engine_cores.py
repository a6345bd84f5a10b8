"""The engine cores behind one front end: one, or `data_parallel_size` of them.

Each core runs in its own process with its own copy of the model (on its own devices), KV
cache and scheduler. A new request goes to the core the load balancer picks; everything
that follows about it (aborts, stop-string finishes) goes to that core. Control calls go
to every core and their answers are combined.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from pagoda.config import EngineConfig
from pagoda.engine.messages import AddRequests, FinishRequests, StepOutputs
from pagoda.engine.request import Request
from pagoda.frontend.core_client import EngineCoreClient
from pagoda.frontend.load_balancer import LoadBalancer
from pagoda.model_source import ModelSource
from pagoda.outputs import EngineStats


def combined_stats(stats: list[EngineStats]) -> EngineStats:
    """Several cores' snapshots as one: counts summed, KV cache usage averaged."""
    return EngineStats(
        sum(s.num_running for s in stats), sum(s.num_waiting for s in stats),
        sum(s.kv_cache_usage for s in stats) / len(stats),
        sum(s.prefix_cache_queries for s in stats), sum(s.prefix_cache_hits for s in stats),
        sum(s.num_preemptions for s in stats), sum(s.spec_draft_tokens for s in stats),
        sum(s.spec_accepted_tokens for s in stats))


class EngineCores:
    """Starts the cores (all at once) and blocks until every one is ready.

    `on_outputs(rank, message)` and `on_death(reason)` run on the cores' reader threads.
    """

    def __init__(self, config: EngineConfig, source: ModelSource,
                 on_outputs: Callable[[int, StepOutputs], None],
                 on_death: Callable[[str], None], tokenizer: Any = None):
        """`tokenizer`: the front end's, handed to each core (grammars need one)."""
        self.clients = [
            EngineCoreClient(config, source, functools.partial(on_outputs, rank),
                             on_death, data_parallel_rank=rank, tokenizer=tokenizer)
            for rank in range(config.parallel.data_parallel_size)
        ]
        try:
            for client in self.clients:
                client.wait_ready()
        except BaseException:
            self.shutdown()
            raise
        self.balancer = LoadBalancer(len(self.clients), config.cache.block_size)
        self._core_of: dict[str, int] = {}
        self.info: dict[str, Any] = {**self.clients[0].info,
                                     "data_parallel_size": len(self.clients)}
        self.max_model_len = min(client.max_model_len for client in self.clients)

    @property
    def pids(self) -> list[int | None]:
        return [client.pid for client in self.clients]

    def add(self, request_id: str, requests: list[Request]) -> None:
        """Send a new request (all its `n` children) to the core the balancer picks."""
        core = self.balancer.choose(requests[0].prompt_token_ids)
        self.clients[core].send(AddRequests(requests))
        self._core_of[request_id] = core

    def finish(self, request_id: str, message: FinishRequests) -> None:
        """Tell the request's core to finish (some of) its children."""
        self.clients[self._core_of[request_id]].send(message)

    def forget(self, request_id: str) -> None:
        """The request has its last output: it no longer counts in its core's load."""
        self.balancer.finished(self._core_of.pop(request_id))

    def call(self, method: str, *args: Any) -> list[Future[Any]]:
        """Call a utility method on every core."""
        return [client.call(method, *args) for client in self.clients]

    def shutdown(self) -> None:
        for client in self.clients:
            client.shutdown()
