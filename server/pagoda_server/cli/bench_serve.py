"""`pagoda bench serve`: load a running server with random prompts and measure it.

Requests arrive as a Poisson process at `--request-rate` (all at once when infinite),
at most `--max-concurrency` in flight. Each streams a completion of exactly its output
length (ignore_eos), so TTFT, TPOT (time per output token after the first) and ITL
(gaps between streamed chunks) are measured as a client sees them.

The client is aiohttp (its C parsers, one connection per stream): at the engine's speed a
thousand concurrent streams carry tens of thousands of events a second, and the load
generator must not be what the benchmark measures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
from dataclasses import dataclass, field
from typing import Any, Literal

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from pagoda.bench.config import WorkloadConfig
from pagoda.bench.dataset import BenchRequest, random_requests
from pagoda.bench.memory import mib
from pagoda.bench.stats import summarize
from pagoda.cli.dataclass_args import add_dataclass_arguments, dataclass_from_args
from pagoda_server import event_loop
from pagoda_server.cli.client import ClientConfig, ServerError, auth_headers, sse_payload


@dataclass
class ServingBenchConfig(WorkloadConfig):
    """Random prompts sent to a running server."""

    dataset: Literal["random"] = "random"
    """Where the prompts come from."""
    num_prompts: int = 100
    """Number of requests."""
    request_rate: float = float("inf")
    """Requests per second, Poisson arrivals; inf: all at once."""
    max_concurrency: int | None = None
    """Most requests in flight at once; None: no limit."""
    seed: int = 0
    """Seed of the prompts and of the arrival times."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_dataclass_arguments(parser, ClientConfig)
    add_dataclass_arguments(parser, ServingBenchConfig)


@dataclass
class _Outcome:
    ok: bool = False
    error: str = ""
    prompt_tokens: int = 0
    output_tokens: int = 0
    latency: float = 0.0
    ttft: float = 0.0
    itls: list[float] = field(default_factory=list)

    @property
    def tpot(self) -> float | None:
        if self.output_tokens < 2:
            return None
        return (self.latency - self.ttft) / (self.output_tokens - 1)


async def _error_message(response: aiohttp.ClientResponse) -> str:
    text = await response.text()
    try:
        return str(json.loads(text)["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return f"HTTP {response.status}: {text[:200]}"


async def _send(session: aiohttp.ClientSession, model: str, request: BenchRequest) -> _Outcome:
    body = {"model": model, "prompt": request.prompt_token_ids,
            "max_tokens": request.output_len, "ignore_eos": True, "stream": True,
            "temperature": 0.0,  # greedy, like `pagoda bench throughput`
            "stream_options": {"include_usage": True}}
    out = _Outcome()
    start = last = time.perf_counter()
    try:
        async with session.post("/v1/completions", json=body) as response:
            if response.status != 200:
                out.error = await _error_message(response)
                return out
            async for raw in response.content:  # one line at a time
                chunk = sse_payload(raw.decode())
                if chunk is None:
                    continue
                now = time.perf_counter()
                if any(c["text"] for c in chunk["choices"]):
                    if not out.ttft:
                        out.ttft = now - start
                    else:
                        out.itls.append(now - last)
                    last = now
                if chunk.get("usage"):
                    out.prompt_tokens = chunk["usage"]["prompt_tokens"]
                    out.output_tokens = chunk["usage"]["completion_tokens"]
    except (aiohttp.ClientError, ServerError, ValueError) as exc:
        out.error = str(exc) or type(exc).__name__
        return out
    out.latency = time.perf_counter() - start
    out.ok = True
    return out


async def _model_card(session: aiohttp.ClientSession, model: str | None) -> dict[str, Any]:
    async with session.get("/v1/models") as response:
        if response.status != 200:
            raise SystemExit(f"the server refused: {await _error_message(response)}")
        cards = (await response.json())["data"]
    return next((c for c in cards if c["id"] == model), cards[0]) if model else cards[0]


async def _benchmark(server: ClientConfig, bench: ServingBenchConfig
                     ) -> tuple[list[_Outcome], float, str, dict[str, dict[str, float]]]:
    connector = aiohttp.TCPConnector(limit=0)  # no cap: --max-concurrency is the cap
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=10.0)
    async with aiohttp.ClientSession(server.url, headers=auth_headers(server.key()),
                                     connector=connector, timeout=timeout) as session:
        card = await _model_card(session, server.model)
        if "vocab_size" not in card:
            raise SystemExit("the server's /v1/models does not report vocab_size; "
                             "random prompts need it")
        requests = random_requests(bench.num_prompts, bench.input_len, bench.output_len,
                                   card["vocab_size"], bench.range_ratio, bench.seed)
        gate = asyncio.Semaphore(bench.max_concurrency or len(requests))
        arrivals = random.Random(bench.seed)

        async def one(request: BenchRequest) -> _Outcome:
            async with gate:
                return await _send(session, card["id"], request)

        start = time.perf_counter()
        tasks = []
        for request in requests:
            tasks.append(asyncio.ensure_future(one(request)))
            if bench.request_rate != float("inf"):
                await asyncio.sleep(arrivals.expovariate(bench.request_rate))
        outcomes = list(await asyncio.gather(*tasks))
        duration = time.perf_counter() - start
        return outcomes, duration, card["id"], await _server_memory(session)


async def _server_memory(session: aiohttp.ClientSession) -> dict[str, dict[str, float]]:
    """The server's processes' resident memory, now and at peak, from its /metrics ({}
    where it reports none: another server, or not on Linux)."""
    async with session.get("/metrics") as response:
        if response.status != 200:
            return {}
        text = await response.text()
    memory: dict[str, dict[str, float]] = {}
    keys = {"pagoda:process_resident_memory_bytes": "resident_bytes",
            "pagoda:process_peak_resident_memory_bytes": "peak_resident_bytes"}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in keys:
                memory.setdefault(sample.labels["process"], {})[keys[sample.name]] = sample.value
    return memory


def _ms(values: list[float]) -> dict[str, float]:
    return summarize([v * 1000 for v in values])


def report(outcomes: list[_Outcome], duration: float, model: str,
           bench: ServingBenchConfig) -> dict[str, Any]:
    done = [o for o in outcomes if o.ok]
    prompt = sum(o.prompt_tokens for o in done)
    output = sum(o.output_tokens for o in done)
    return {
        "model": model, "num_prompts": len(outcomes), "request_rate": bench.request_rate,
        "max_concurrency": bench.max_concurrency, "duration_s": duration,
        "completed": len(done), "failed": len(outcomes) - len(done),
        "errors": sorted({o.error for o in outcomes if not o.ok})[:10],
        "total_input_tokens": prompt, "total_output_tokens": output,
        "request_throughput": len(done) / duration,
        "output_throughput": output / duration,
        "total_token_throughput": (prompt + output) / duration,
        "ttft_ms": _ms([o.ttft for o in done]),
        "tpot_ms": _ms([t for o in done if (t := o.tpot) is not None]),
        "itl_ms": _ms([gap for o in done for gap in o.itls]),
    }


def _print(r: dict[str, Any]) -> None:
    print(f"== Serving benchmark: {r['model']} ==")
    print(f"Successful requests:             {r['completed']} (failed: {r['failed']})")
    print(f"Benchmark duration (s):          {r['duration_s']:.2f}")
    print(f"Total input / generated tokens:  {r['total_input_tokens']} / "
          f"{r['total_output_tokens']}")
    print(f"Request throughput (req/s):      {r['request_throughput']:.2f}")
    print(f"Output token throughput (tok/s): {r['output_throughput']:.2f}")
    print(f"Total token throughput (tok/s):  {r['total_token_throughput']:.2f}")
    if "client_cpu_s" in r:
        print(f"Client CPU time (s):             {r['client_cpu_s']:.2f}")
    for key, name in (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT"), ("itl_ms", "ITL")):
        s = r[key]
        if s:
            print(f"{name + ' (ms):':<33}mean {s['mean']:.2f}, median {s['median']:.2f}, "
                  f"p99 {s['p99']:.2f}")
    for process, sizes in r.get("server_memory", {}).items():
        print(f"{'Peak resident memory, ' + process + ':':<33}"
              f"{mib(sizes.get('peak_resident_bytes'))} (now {mib(sizes.get('resident_bytes'))})")
    for error in r["errors"]:
        print(f"error: {error}")


def run(args: argparse.Namespace) -> int:
    server = dataclass_from_args(ClientConfig, args)
    bench = dataclass_from_args(ServingBenchConfig, args)
    try:
        outcomes, duration, model, memory = event_loop.run(_benchmark(server, bench))
    except aiohttp.ClientError as exc:
        raise SystemExit(f"cannot reach the server at {server.url}: {exc}") from None
    result = report(outcomes, duration, model, bench)
    result["server_memory"] = memory
    # The load generator's own CPU time: near `duration_s`, the client limited the run.
    result["client_cpu_s"] = time.process_time()
    _print(result)
    if bench.output_json:
        with open(bench.output_json, "w") as f:
            json.dump(result, f, indent=2)
    return 0 if result["failed"] == 0 else 1
