"""The engine cores behind one front end: one, or `data_parallel_size` of them.

Each core runs in its own process with its own copy of the model (on its own devices), KV
cache and scheduler. A new request goes to the core the load balancer picks; everything
that follows about it (aborts, stop-string finishes) goes to that core. Control calls go
to every core and their answers are combined.

A core that dies can be replaced by a new one of the same config (`restart`, when the front
end decides to), without touching the others.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from pagoda.config import EngineConfig
from pagoda.engine.messages import AddRequests, FinishRequests, StepOutputs
from pagoda.engine.request import Request
from pagoda.frontend.core_client import EngineCoreClient, EngineDeadError, EngineStartupError
from pagoda.frontend.load_balancer import LoadBalancer
from pagoda.model_source import ModelSource
from pagoda.outputs import EngineStats


def combined_stats(stats: list[EngineStats]) -> EngineStats:
    """Several cores' snapshots as one: counts summed, KV cache usage averaged (zeros for
    none: every core is restarting)."""
    if not stats:
        return EngineStats(0, 0, 0.0, 0, 0, 0)
    return EngineStats(
        sum(s.num_running for s in stats), sum(s.num_waiting for s in stats),
        sum(s.kv_cache_usage for s in stats) / len(stats),
        sum(s.prefix_cache_queries for s in stats), sum(s.prefix_cache_hits for s in stats),
        sum(s.num_preemptions for s in stats), sum(s.spec_draft_tokens for s in stats),
        sum(s.spec_accepted_tokens for s in stats))


class EngineCores:
    """Starts the cores (all at once); `wait_ready` blocks until every one is ready, and
    must come before anything else.

    `on_outputs(rank, message)` and `on_death(rank, reason)` run on the cores' reader
    threads. A core marked `down` (dead, a new one starting: `restart`) takes no new
    requests and no control calls until `replace` puts its successor in its place.
    """

    def __init__(self, config: EngineConfig, source: ModelSource,
                 on_outputs: Callable[[int, StepOutputs], None],
                 on_death: Callable[[int, str], None]):
        self._start = functools.partial(self._client, config, source, on_outputs, on_death)
        self.down: set[int] = set()
        """Cores that died and are being restarted."""
        self._starting: dict[int, EngineCoreClient] = {}
        self._closed = False
        self.clients = [self._start(rank)
                        for rank in range(config.parallel.data_parallel_size)]
        self.balancer = LoadBalancer(len(self.clients), config.cache.block_size)
        self._core_of: dict[str, int] = {}

    def wait_ready(self) -> None:
        """Block until every core is ready (EngineStartupError if one fails: then all are
        shut down)."""
        try:
            for client in self.clients:
                client.wait_ready()
        except BaseException:
            self.shutdown()
            raise

    @property
    def info(self) -> dict[str, Any]:
        """The first core's description (all are alike), once ready."""
        return {**self.clients[0].info, "data_parallel_size": len(self.clients)}

    @property
    def max_model_len(self) -> int:
        """The longest context every core takes, once ready."""
        return min(client.max_model_len for client in self.clients)

    @staticmethod
    def _client(config: EngineConfig, source: ModelSource,
                on_outputs: Callable[[int, StepOutputs], None],
                on_death: Callable[[int, str], None], rank: int) -> EngineCoreClient:
        return EngineCoreClient(config, source, functools.partial(on_outputs, rank),
                                functools.partial(on_death, rank), data_parallel_rank=rank)

    @property
    def pids(self) -> list[int | None]:
        return [client.pid for client in self.clients]

    def add(self, request_id: str, requests: list[Request]) -> None:
        """Send a new request (all its `n` children) to the core the balancer picks;
        EngineDeadError (the request not counted anywhere) if that core has just died."""
        core = self.balancer.choose(requests[0].prompt_token_ids, self.down)
        try:
            self.clients[core].send(AddRequests(requests))
        except EngineDeadError:
            self.balancer.finished(core)
            raise
        self._core_of[request_id] = core

    def finish(self, request_id: str, message: FinishRequests) -> None:
        """Tell the request's core to finish (some of) its children."""
        self.clients[self._core_of[request_id]].send(message)

    def forget(self, request_id: str) -> None:
        """The request has its last output: it no longer counts in its core's load."""
        self.balancer.finished(self._core_of.pop(request_id))

    def requests_of(self, core: int) -> list[str]:
        """The requests in flight on `core`."""
        return [request_id for request_id, c in self._core_of.items() if c == core]

    def call(self, method: str, *args: Any) -> list[Future[Any]]:
        """Call a utility method on every core that is up."""
        return [client.call(method, *args) for rank, client in enumerate(self.clients)
                if rank not in self.down]

    def restart(self, core: int) -> EngineCoreClient:
        """Start a new core in place of `core` (marked down by the caller) and block until
        it is ready; EngineStartupError if it fails to start, or the cores are shut down
        meanwhile. The dead one's process is reaped first. `replace` puts the new one in
        service."""
        self.clients[core].shutdown()
        if self._closed:
            raise EngineStartupError("the engine cores were shut down")
        client = self._starting[core] = self._start(core)
        try:
            client.wait_ready()
        finally:
            self._starting.pop(core, None)
        if self._closed:
            client.shutdown()
            raise EngineStartupError("the engine cores were shut down")
        return client

    def replace(self, core: int, client: EngineCoreClient) -> None:
        """Put `client` (from `restart`) in service as `core`."""
        self.clients[core] = client
        self.down.discard(core)

    def shutdown(self) -> None:
        self._closed = True
        for client in [*self.clients, *list(self._starting.values())]:
            client.shutdown()
