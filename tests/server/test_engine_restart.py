"""`--restart-engine`: a killed engine-core process fails the requests in flight at once
with a retryable 503 (`engine_restarting`, Retry-After), /health says so, and a new core
takes its place: the server then answers as before the crash."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest

from tests.server.conftest import MODEL, TINY_SERVER_ARGS
from tests.server.metrics_text import scrape
from tests.server.openai_spec import validate
from tests.server.server_process import ServerProcess, stream_payloads

LONG = {"model": MODEL, "prompt": "w5 w6", "max_tokens": 480, "temperature": 0.0, "n": 4,
        "ignore_eos": True}
GREEDY = {"model": MODEL, "prompt": "w7 w8 w9", "max_tokens": 12, "temperature": 0.0,
          "ignore_eos": True}


@pytest.fixture
def restarting_server(tiny_model, tmp_path):
    process = ServerProcess([str(tiny_model), *TINY_SERVER_ARGS, "--restart-engine"],
                            tmp_path / "serve.log")
    yield process
    process.stop()


def _greedy_text(server: ServerProcess) -> str:
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="none", max_retries=0)
    reply = client.completions.create(model=MODEL, prompt=GREEDY["prompt"],
                                      max_tokens=GREEDY["max_tokens"], temperature=0.0,
                                      extra_body={"ignore_eos": True})
    return reply.choices[0].text


def _assert_restarting(response: httpx.Response) -> None:
    assert response.status_code == 503, response.text
    assert response.headers["retry-after"] == "5"
    validate("ErrorResponse", response.json())
    assert response.json()["error"]["code"] == "engine_restarting"


def test_a_killed_core_is_restarted_and_serves_as_before(restarting_server) -> None:
    server = restarting_server
    before = _greedy_text(server)
    old_pid = server.engine_core().pid
    with httpx.Client(base_url=server.url, timeout=30) as http, ThreadPoolExecutor(2) as pool:
        streaming = pool.submit(stream_payloads, http, LONG)
        whole = pool.submit(http.post, "/v1/completions", json=LONG)
        deadline = time.monotonic() + 30
        while scrape(server.url)["pagoda:num_requests_running"] < 8:  # until both generate
            assert time.monotonic() < deadline
            time.sleep(0.01)
        server.engine_core().kill()
        killed = time.monotonic()
        response = whole.result(timeout=10)
        frames = streaming.result(timeout=10)
        assert time.monotonic() - killed < 5

        _assert_restarting(response)
        assert "engine core died" in response.json()["error"]["message"]
        last = json.loads(frames[-1])
        assert last["error"]["code"] == "engine_restarting"

        started = time.monotonic()  # a new core takes seconds to load: refused meanwhile
        _assert_restarting(http.post("/v1/completions", json=GREEDY))
        assert time.monotonic() - started < 2
        _assert_restarting(http.get("/health"))

        deadline = time.monotonic() + 120
        while (health := http.get("/health")).status_code != 200:
            assert time.monotonic() < deadline, health.text
            time.sleep(0.2)
    assert server.engine_core().pid != old_pid
    assert _greedy_text(server) == before
    metrics = scrape(server.url)
    assert metrics["pagoda:num_requests_running"] == 0
    assert metrics["pagoda:kv_cache_usage_perc"] == 0
    assert metrics["pagoda:engine_core_restarts_total"] == 1
    assert "Traceback" not in response.text
    assert "starting a new one" in server.output() and "serving again" in server.output()
