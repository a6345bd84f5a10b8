"""Prometheus metrics: the engine's state and totals read at scrape time, request timings
(TTFT, inter-token latency, end-to-end latency) observed as outputs stream."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import aclosing, suppress

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from pagoda.bench.memory import peak_resident_bytes, resident_bytes
from pagoda.frontend.async_llm import AsyncLLM, EngineDeadError, RequestCounters
from pagoda.outputs import EngineStats, RequestOutput

PREFIX = "pagoda:"
_STATS_TIMEOUT_S = 5.0
_TTFT_BUCKETS = (0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
                 7.5, 10.0, 20.0, 40.0, 80.0)
_ITL_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75,
                1.0, 2.5, 5.0, 10.0)
_E2E_BUCKETS = (0.1, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 60.0,
                120.0, 240.0, 480.0)


class _EngineCollector(Collector):
    """The engine snapshot taken just before a scrape, as Prometheus metrics."""

    def __init__(self) -> None:
        self.stats = EngineStats(0, 0, 0.0, 0, 0, 0)
        self.counters = RequestCounters()
        self.processes: dict[str, int | None] = {}
        """Process name ("frontend", "engine_core_0" ...) -> pid, for the memory gauges."""

    def collect(self) -> Iterator[Metric]:
        s, c = self.stats, self.counters
        yield GaugeMetricFamily(f"{PREFIX}num_requests_running",
                                "Requests being generated.", value=s.num_running)
        yield GaugeMetricFamily(f"{PREFIX}num_requests_waiting",
                                "Requests waiting to be scheduled.", value=s.num_waiting)
        yield GaugeMetricFamily(f"{PREFIX}kv_cache_usage_perc",
                                "Fraction of KV cache blocks in use (0 to 1).",
                                value=s.kv_cache_usage)
        yield CounterMetricFamily(f"{PREFIX}prefix_cache_queries",
                                  "Prompt tokens looked up in the prefix cache.",
                                  value=s.prefix_cache_queries)
        yield CounterMetricFamily(f"{PREFIX}prefix_cache_hits",
                                  "Prompt tokens found in the prefix cache.",
                                  value=s.prefix_cache_hits)
        yield CounterMetricFamily(f"{PREFIX}num_preemptions",
                                  "Requests preempted for lack of KV cache blocks.",
                                  value=s.num_preemptions)
        yield CounterMetricFamily(f"{PREFIX}prompt_tokens", "Prompt tokens processed.",
                                  value=c.prompt_tokens)
        yield CounterMetricFamily(f"{PREFIX}generation_tokens", "Tokens generated.",
                                  value=c.generation_tokens)
        finished = CounterMetricFamily(f"{PREFIX}request_success",
                                       "Completions finished, by finish reason.",
                                       labels=["finished_reason"])
        for reason, count in sorted(c.finished.items()):
            finished.add_metric([reason], count)
        yield finished
        yield CounterMetricFamily(f"{PREFIX}request_timeouts",
                                  "Requests aborted at the server's request timeout.",
                                  value=c.timed_out)
        yield CounterMetricFamily(f"{PREFIX}engine_core_restarts",
                                  "Dead engine cores replaced by new ones.",
                                  value=c.core_restarts)
        yield from self._memory()

    def _memory(self) -> Iterator[Metric]:
        """Resident memory of the front end and of each engine core, now and at its peak
        (where the platform tells: Linux)."""
        now = GaugeMetricFamily(f"{PREFIX}process_resident_memory_bytes",
                                "Resident memory of a Pagoda process.", labels=["process"])
        peak = GaugeMetricFamily(f"{PREFIX}process_peak_resident_memory_bytes",
                                 "Largest resident memory a Pagoda process has had.",
                                 labels=["process"])
        for name, pid in self.processes.items():
            if pid is None:
                continue
            for family, size in ((now, resident_bytes(pid)), (peak, peak_resident_bytes(pid))):
                if size is not None:
                    family.add_metric([name], size)
        yield now
        yield peak


class ServerMetrics:
    """One registry per app, so several apps can live in one process."""

    def __init__(self, engine: AsyncLLM):
        self.engine = engine
        self.registry = CollectorRegistry()
        self._engine_metrics = _EngineCollector()
        self.registry.register(self._engine_metrics)
        self.ttft = Histogram(f"{PREFIX}time_to_first_token_seconds",
                              "Time from arrival to the first generated token.",
                              buckets=_TTFT_BUCKETS, registry=self.registry)
        self.itl = Histogram(f"{PREFIX}inter_token_latency_seconds",
                             "Time between consecutive generated tokens.",
                             buckets=_ITL_BUCKETS, registry=self.registry)
        self.e2e = Histogram(f"{PREFIX}e2e_request_latency_seconds",
                             "Time from arrival to the last token.",
                             buckets=_E2E_BUCKETS, registry=self.registry)

    async def render(self) -> bytes:
        """The exposition text, with a fresh engine snapshot (the last one if it died)."""
        stats = self.engine.last_stats
        if self.engine.supervisor.is_healthy:
            with suppress(EngineDeadError, asyncio.TimeoutError):
                stats = await asyncio.wait_for(self.engine.stats(), _STATS_TIMEOUT_S)
        self._engine_metrics.stats = stats
        self._engine_metrics.counters = self.engine.counters
        self._engine_metrics.processes = {"frontend": os.getpid()} | {  # a restart: new pids
            f"engine_core_{rank}": pid for rank, pid in enumerate(self.engine.core_pids)}
        return generate_latest(self.registry)

    async def track(self, outputs: AsyncIterator[RequestOutput]) -> AsyncIterator[RequestOutput]:
        """Pass a request's outputs through, observing its latencies."""
        start = time.monotonic()
        last: float | None = None
        produced = 0  # tokens so far of the longest completion
        async with aclosing(outputs):  # type: ignore[type-var]
            async for output in outputs:
                now = time.monotonic()
                longest = max((len(c.token_ids) for c in output.outputs), default=0)
                if longest > produced:
                    if last is None:
                        self.ttft.observe(now - start)
                    else:
                        gap = (now - last) / (longest - produced)
                        for _ in range(longest - produced):
                            self.itl.observe(gap)
                    last, produced = now, longest
                if output.finished:
                    self.e2e.observe(now - start)
                yield output
