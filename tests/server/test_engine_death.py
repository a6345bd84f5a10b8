"""A killed engine-core process: requests in flight fail with 5xx at once, /health turns
503, new requests are refused, and nothing hangs."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.server.conftest import MODEL, TINY_SERVER_ARGS
from tests.server.metrics_text import scrape
from tests.server.openai_spec import validate
from tests.server.server_process import ServerProcess, stream_payloads

LONG = {"model": MODEL, "prompt": "w5 w6", "max_tokens": 500, "temperature": 0.0,
        "ignore_eos": True}


@pytest.fixture
def doomed_server(tiny_model, tmp_path):
    process = ServerProcess([str(tiny_model), *TINY_SERVER_ARGS], tmp_path / "serve.log")
    yield process
    process.stop()


def test_killed_engine_fails_requests_at_once(doomed_server):
    with httpx.Client(base_url=doomed_server.url, timeout=30) as http, \
            ThreadPoolExecutor(2) as pool:
        streaming = pool.submit(stream_payloads, http, LONG)
        whole = pool.submit(http.post, "/v1/completions", json=LONG)
        while scrape(doomed_server.url)["pagoda:num_requests_running"] < 2:
            time.sleep(0.01)  # until both generate
        doomed_server.engine_core().kill()
        killed = time.monotonic()
        response = whole.result(timeout=10)
        frames = streaming.result(timeout=10)
        assert time.monotonic() - killed < 5

        assert response.status_code == 503
        validate("ErrorResponse", response.json())
        assert "engine" in response.json()["error"]["message"]
        last = json.loads(frames[-1])
        assert "error" in last and frames[-1] != "[DONE]"

        assert http.get("/health").status_code == 503
        started = time.monotonic()
        refused = http.post("/v1/chat/completions", json={
            "model": MODEL, "messages": [{"role": "user", "content": "w5"}]})
        assert refused.status_code == 503 and time.monotonic() - started < 2
        assert http.get("/metrics").status_code == 200
    assert "Traceback" not in response.text
