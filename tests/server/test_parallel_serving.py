"""`pagoda serve` over several devices: two engine cores (data parallel) and two tensor-
parallel workers behind one real server; the official OpenAI client gets the greedy
tokens of a single-device run, and the banner says how the model is spread."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from openai import AsyncOpenAI

from pagoda import LLM, SamplingParams
from tests.engine.tiny_models import VOCAB
from tests.server.conftest import MODEL, TINY_SERVER_ARGS
from tests.server.server_process import ServerProcess

PROMPTS = [[(7 * i + j) % (VOCAB - 3) + 3 for j in range(5 + i)] for i in range(6)]


async def _complete_all(url: str) -> list[str]:
    client = AsyncOpenAI(base_url=f"{url}/v1", api_key="unused")

    async def one(prompt: list[int]) -> str:
        response = await client.completions.create(
            model=MODEL, prompt=prompt, max_tokens=6, temperature=0,
            extra_body={"ignore_eos": True})
        return response.choices[0].text

    try:
        return list(await asyncio.gather(*(one(p) for p in PROMPTS)))
    finally:
        await client.close()


@pytest.mark.parametrize(("layout", "banner"), [
    (["--data-parallel-size", "2"], "parallel:   2 engine cores x 1 device\n"),
    (["--tensor-parallel-size", "2"], "parallel:   1 engine core x 2 devices (tensor 2 x "
                                      "pipeline 1)\n"),
], ids=["dp2", "tp2"])
def test_parallel_server_answers_like_one_device(tiny_model: Path, tmp_path: Path,
                                                 layout: list[str], banner: str) -> None:
    llm = LLM(str(tiny_model), dtype="float32", device="cpu", num_kv_blocks=64)
    params = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True)
    expected = [o.outputs[0].text for o in llm.generate(
        [{"prompt_token_ids": p} for p in PROMPTS], params, use_tqdm=False)]
    server = ServerProcess([str(tiny_model), *TINY_SERVER_ARGS, *layout], tmp_path / "s.log")
    try:
        assert asyncio.run(_complete_all(server.url)) == expected
        assert all(expected)  # text came back
        assert banner in server.output()
    finally:
        server.stop()
