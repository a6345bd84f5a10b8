"""Continuous batching through the HTTP server: dozens of simultaneous streams give the
same greedy text as one at a time, requests run together, a client that disconnects
frees its blocks (as /metrics shows)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import socket
import time

import httpx
import openai

from tests.server.conftest import MODEL
from tests.server.metrics_text import scrape

NUM_STREAMS = 32
_rng = random.Random(3)
PROMPTS = [" ".join(f"w{_rng.randrange(3, 256)}" for _ in range(_rng.randrange(2, 30)))
           for _ in range(NUM_STREAMS)]
GREEDY = {"temperature": 0.0, "max_tokens": 16, "extra_body": {"ignore_eos": True}}


async def _stream(client: openai.AsyncOpenAI, prompt: str) -> str:
    stream = await client.completions.create(model=MODEL, prompt=prompt, stream=True, **GREEDY)
    return "".join([choice.text async for chunk in stream for choice in chunk.choices])


def test_concurrent_streams_match_one_at_a_time(server):
    with openai.OpenAI(base_url=f"{server.url}/v1", api_key=server.api_key) as client:
        alone = [client.completions.create(model=MODEL, prompt=p, **GREEDY).choices[0].text
                 for p in PROMPTS]

    async def together() -> list[str]:
        async with openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key=server.api_key,
                                      max_retries=0) as client:
            return await asyncio.gather(*(_stream(client, p) for p in PROMPTS))

    assert asyncio.run(together()) == alone


def _wait_until_idle(url: str) -> dict[str, float]:
    deadline = time.monotonic() + 10
    while True:
        metrics = scrape(url)
        idle = metrics["pagoda:num_requests_running"] == 0 and \
            metrics["pagoda:kv_cache_usage_perc"] == 0
        if idle or time.monotonic() > deadline:
            return metrics
        time.sleep(0.1)


def test_long_streams_run_together_and_free_their_blocks_when_dropped(server):
    body = {"model": MODEL, "max_tokens": 450, "temperature": 0.0, "ignore_eos": True,
            "stream": True}
    with contextlib.ExitStack() as stack:
        http = stack.enter_context(httpx.Client(base_url=server.url, headers=server.headers,
                                                timeout=30))
        lines = []  # kept: dropping a line iterator closes its response
        for i in range(8):
            response = stack.enter_context(http.stream(
                "POST", "/v1/completions", json={**body, "prompt": f"w{i + 5} w6"}))
            lines.append(response.iter_lines())
            assert next(lines[-1]).startswith("data:")
        during = scrape(server.url)
        assert during["pagoda:num_requests_running"] == 8  # batched together
        assert during["pagoda:kv_cache_usage_perc"] > 0
    after = _wait_until_idle(server.url)  # every connection closed mid-stream
    assert after["pagoda:num_requests_running"] == 0
    assert after["pagoda:kv_cache_usage_perc"] == 0


def test_disconnected_client_frees_its_blocks(server):
    body = {"model": MODEL, "prompt": "w5 w6 w7", "max_tokens": 400, "temperature": 0.0,
            "ignore_eos": True, "stream": True}
    before = scrape(server.url)
    with httpx.Client(base_url=server.url, headers=server.headers, timeout=30) as http, \
            http.stream("POST", "/v1/completions", json=body) as response:
        lines = response.iter_lines()
        assert next(lines).startswith("data:")
        during = scrape(server.url)
        assert during["pagoda:num_requests_running"] == 1
        assert during["pagoda:kv_cache_usage_perc"] > 0
    after = _wait_until_idle(server.url)  # leaving the block closed the connection
    assert after["pagoda:num_requests_running"] == 0
    assert after["pagoda:kv_cache_usage_perc"] == 0
    aborted = "pagoda:request_success_total{finished_reason=abort}"
    assert after[aborted] == before.get(aborted, 0) + 1
    assert after["pagoda:generation_tokens_total"] - before["pagoda:generation_tokens_total"] < 400


def test_disconnected_non_streaming_client_is_aborted(server):
    body = json.dumps({"model": MODEL, "prompt": "w8 w9", "max_tokens": 500,
                       "temperature": 0.0, "ignore_eos": True}).encode()
    aborted = "pagoda:request_success_total{finished_reason=abort}"
    before = scrape(server.url).get(aborted, 0)
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                     b"Content-Type: application/json\r\n"
                     + f"Authorization: Bearer {server.api_key}\r\n".encode()
                     + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        time.sleep(0.05)  # hang up long before 500 tokens are done
    metrics = _wait_until_idle(server.url)
    assert metrics[aborted] == before + 1
    assert metrics["pagoda:num_requests_running"] == 0
    assert metrics["pagoda:kv_cache_usage_perc"] == 0


def test_metrics_cover_requests(server):
    metrics = scrape(server.url)
    for name in ("pagoda:num_requests_waiting", "pagoda:prefix_cache_queries_total",
                 "pagoda:prefix_cache_hits_total", "pagoda:num_preemptions_total",
                 "pagoda:prompt_tokens_total", "pagoda:generation_tokens_total",
                 "pagoda:time_to_first_token_seconds_count",
                 "pagoda:inter_token_latency_seconds_count",
                 "pagoda:e2e_request_latency_seconds_count"):
        assert name in metrics, name
    assert metrics["pagoda:time_to_first_token_seconds_count"] > 0
    assert metrics["pagoda:generation_tokens_total"] > 0
