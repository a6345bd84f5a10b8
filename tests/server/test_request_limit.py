"""A bounded engine: requests beyond max_num_seqs running and max_waiting_requests waiting
answer 503 with Retry-After at once; once the engine drains, it serves again."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from tests.server.conftest import MODEL, TINY_SERVER_ARGS
from tests.server.openai_spec import validate
from tests.server.server_process import ServerProcess

LONG = {"model": MODEL, "prompt": "w5 w6", "max_tokens": 400, "ignore_eos": True,
        "stream": True}


@pytest.fixture(scope="module")
def bounded(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory):
    process = ServerProcess([str(tiny_model), *TINY_SERVER_ARGS, "--max-num-seqs", "1",
                             "--max-waiting-requests", "1"],
                            tmp_path_factory.mktemp("bounded") / "serve.log")
    yield process
    process.stop()


async def _stream(client: httpx.AsyncClient) -> tuple[int, dict[str, str], str]:
    async with client.stream("POST", "/v1/completions", json=LONG) as response:
        body = (await response.aread()).decode()
        return response.status_code, dict(response.headers), body


def test_requests_beyond_the_bound_answer_503_with_retry_after(bounded) -> None:
    async def burst() -> list[tuple[int, dict[str, str], str]]:
        async with httpx.AsyncClient(base_url=bounded.url, timeout=120) as client:
            return await asyncio.gather(*(_stream(client) for _ in range(6)))

    results = asyncio.run(burst())
    served = [r for r in results if r[0] == 200]
    refused = [r for r in results if r[0] == 503]
    assert len(served) + len(refused) == 6 and len(served) >= 2 and refused, \
        [r[0] for r in results]
    for _, _, body in served:
        assert body.rstrip().endswith("data: [DONE]")
    for _, headers, body in refused:
        assert headers["retry-after"] == "1"
        error = httpx.Response(503, content=body).json()
        validate("ErrorResponse", error)
        assert error["error"]["code"] == "overloaded"
        assert "max_waiting_requests" in error["error"]["message"]
    after = httpx.post(f"{bounded.url}/v1/completions",
                       json={"model": MODEL, "prompt": "w5", "max_tokens": 2}, timeout=60)
    assert after.status_code == 200, after.text
