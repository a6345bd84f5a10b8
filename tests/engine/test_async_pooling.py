"""AsyncLLM with a pooling model in an engine-core process of its own (steps overlapped,
as on a GPU): pooled outputs cross the process boundary and equal HF's, concurrent
requests each get their own, and a cancelled request is aborted in the core."""

from __future__ import annotations

import asyncio
import random

import pytest
import torch

from pagoda.config import CacheConfig, EngineConfig, ModelConfig, SchedulerConfig
from pagoda.frontend.async_llm import AsyncLLM
from pagoda.pooling_params import PoolingParams
from tests.engine.tiny_models import VOCAB
from tests.models.tiny_pooling import hf_hidden_states, make_decoder_embedder, pooled

rng = random.Random(5)
PROMPTS = [[rng.randrange(3, VOCAB) for _ in range(rng.randrange(1, 30))] for _ in range(12)]


@pytest.fixture(scope="module")
def embedder(tmp_path_factory):
    path = make_decoder_embedder(tmp_path_factory.mktemp("embedder"))
    engine = AsyncLLM(EngineConfig(
        model=ModelConfig(str(path), dtype="float32"),
        cache=CacheConfig(block_size=4, num_kv_blocks=96),
        scheduler=SchedulerConfig(max_num_batched_tokens=16, async_scheduling=True),
        device="cpu"))
    yield path, engine
    engine.shutdown()


def test_concurrent_requests_get_their_own_outputs(embedder):
    path, engine = embedder
    want = torch.stack([pooled(h, "last", True) for h in hf_hidden_states(path, PROMPTS)])

    async def main():
        return await asyncio.gather(*(
            engine.encode({"prompt_token_ids": p}, PoolingParams(), f"e{i}")
            for i, p in enumerate(PROMPTS)))

    outputs = asyncio.run(main())
    assert [o.request_id for o in outputs] == [f"e{i}" for i in range(len(PROMPTS))]
    assert all(o.finish_reason == "stop" and o.finished for o in outputs)
    assert (torch.tensor([o.data for o in outputs]) - want).abs().max() <= 1e-5
    assert engine.counters.prompt_tokens >= sum(map(len, PROMPTS))


def test_a_cancelled_request_is_aborted(embedder):
    _, engine = embedder
    aborted = engine.counters.finished.get("abort", 0)

    async def main():
        task = asyncio.ensure_future(engine.encode([5, 6, 7], PoolingParams(), "gone"))
        await asyncio.sleep(0)  # submitted, its output not yet delivered
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert engine.num_unfinished_requests == 0
        # The id is free again, and the engine serves the next request.
        return await engine.encode([5, 6, 7], PoolingParams(), "gone")

    assert asyncio.run(main()).data is not None
    assert engine.counters.finished["abort"] == aborted + 1


def test_invalid_requests_fail_before_the_core_hears(embedder):
    _, engine = embedder

    async def main():
        with pytest.raises(ValueError, match="dimensions is not supported by this model"):
            await engine.encode([5, 6], PoolingParams(dimensions=4), "bad")
        with pytest.raises(ValueError, match="this model is a pooling model"):
            async for _ in engine.generate([5, 6], engine.default_sampling_params(), "text"):
                pass

    asyncio.run(main())
    assert engine.num_unfinished_requests == 0
