"""A bounded soak (about a minute on 2 cores): rounds of requests at twice the KV cache's
capacity, streaming and not, with random aborts (clients that disconnect); afterwards
every request that was kept gave the same greedy text as when run alone, none hung, the
KV cache and the running count are back to zero, preemptions happened, and the
processes' memory did not grow from one round to the next."""

from __future__ import annotations

import asyncio
import json
import random
import time
from pathlib import Path

import httpx
import psutil
import pytest

from tests.server.conftest import MODEL
from tests.server.metrics_text import scrape
from tests.server.server_process import ServerProcess

BLOCKS, BLOCK_SIZE = 24, 8  # 192 tokens of KV cache
REQUESTS = 24  # each up to ~40 tokens of prompt and output: about twice the capacity
ROUNDS = 3
MEMORY_GROWTH = 64 * 2**20
"""Most resident memory a process may gain between the second and the last round."""


@pytest.fixture(scope="module")
def soak_server(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory):
    process = ServerProcess([str(tiny_model), "--dtype", "float32", "--device", "cpu",
                             "--num-kv-blocks", str(BLOCKS), "--block-size", str(BLOCK_SIZE),
                             "--max-num-seqs", "16", "--max-num-batched-tokens", "64",
                             "--served-model-name", MODEL],
                            tmp_path_factory.mktemp("soak") / "serve.log")
    yield process
    process.stop()


def _workload(seed: int) -> list[dict]:
    rng = random.Random(seed)
    return [{"prompt": " ".join(f"w{rng.randrange(3, 256)}" for _ in range(rng.randrange(4, 20))),
             "max_tokens": rng.randrange(8, 24), "stream": rng.random() < 0.5,
             "abort_after": rng.uniform(0.05, 0.5) if rng.random() < 0.25 else None}
            for _ in range(REQUESTS)]


async def _one(client: httpx.AsyncClient, request: dict) -> str | None:
    body = {"model": MODEL, "prompt": request["prompt"], "max_tokens": request["max_tokens"],
            "temperature": 0.0, "ignore_eos": True, "stream": request["stream"]}

    async def call() -> str:
        if not request["stream"]:
            response = await client.post("/v1/completions", json=body)
            assert response.status_code == 200, response.text
            return response.json()["choices"][0]["text"]
        text = []
        async with client.stream("POST", "/v1/completions", json=body) as response:
            assert response.status_code == 200
            async for line in response.aiter_lines():
                if line.startswith("data: {"):
                    text.append(json.loads(line[6:])["choices"][0]["text"])
        return "".join(text)

    task = asyncio.ensure_future(call())
    if request["abort_after"] is None:
        return await asyncio.wait_for(task, 120)  # a hang fails the test
    done, _ = await asyncio.wait({task}, timeout=request["abort_after"])
    if not done:
        task.cancel()  # the client goes away
        await asyncio.gather(task, return_exceptions=True)
        return None
    return task.result()


def _round(url: str, workload: list[dict]) -> list[str | None]:
    async def run() -> list[str | None]:
        async with httpx.AsyncClient(base_url=url, timeout=120) as client:
            return await asyncio.gather(*(_one(client, r) for r in workload))

    return asyncio.run(run())


def _idle(url: str) -> dict[str, float]:
    deadline = time.monotonic() + 15
    while True:
        metrics = scrape(url)
        if (metrics["pagoda:num_requests_running"] == 0
                and metrics["pagoda:num_requests_waiting"] == 0
                and metrics["pagoda:kv_cache_usage_perc"] == 0) or time.monotonic() > deadline:
            return metrics


def _rss(server: ServerProcess) -> list[int]:
    return [server.engine_core().memory_info().rss,
            psutil.Process(server.process.pid).memory_info().rss]


def test_soak_with_preemption_and_aborts_loses_nothing(soak_server) -> None:
    url = soak_server.url
    rss, aborted = [], 0
    for index in range(ROUNDS):
        workload = _workload(index % 2)  # rounds 0 and 2 are the same requests
        texts = _round(url, workload)
        metrics = _idle(url)
        assert metrics["pagoda:num_requests_running"] == 0
        assert metrics["pagoda:kv_cache_usage_perc"] == 0
        kept = [(r, t) for r, t in zip(workload, texts) if t is not None]
        aborted += REQUESTS - len(kept)
        assert len(kept) >= REQUESTS // 2
        with httpx.Client(base_url=url, timeout=120) as client:
            for request, text in kept:
                alone = client.post("/v1/completions", json={
                    "model": MODEL, "prompt": request["prompt"],
                    "max_tokens": request["max_tokens"], "temperature": 0.0,
                    "ignore_eos": True}).json()["choices"][0]["text"]
                assert text == alone, request
        rss.append(_rss(soak_server))
    assert scrape(url)["pagoda:num_preemptions_total"] > 0 and aborted > 0
    for second, last in zip(rss[1], rss[-1]):
        assert last - second < MEMORY_GROWTH, rss
