"""Data parallelism: two engine cores, each with its own copy of the model, KV cache and
scheduler, behind one AsyncLLM front end. Requests spread over both, those that share a
first KV block go to the same core (its prefix cache), every request gets HF's greedy
tokens (chunked prefill and preemption in play), and one core dying ends the engine."""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path

import psutil
import pytest

from pagoda import LLM, SamplingParams
from pagoda.config import EngineConfig
from pagoda.frontend.async_llm import AsyncLLM, EngineDeadError
from pagoda.frontend.load_balancer import LoadBalancer
from tests.engine.tiny_models import VOCAB, hf_greedy, make_checkpoint, tiny_configs

NEW_TOKENS = 8
GREEDY = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True)


def _prompts(seed: int, lengths: list[int], prefix: list[int] | None = None) -> list[list[int]]:
    rng = random.Random(seed)
    return [(prefix or []) + [rng.randrange(3, VOCAB) for _ in range(n)] for n in lengths]


def test_balancer_takes_the_least_loaded_core_or_the_one_with_the_prefix() -> None:
    balancer = LoadBalancer(3, block_size=4, slack=1)
    assert [balancer.choose([9] * n) for n in (1, 2, 3)] == [0, 1, 2]  # shorter than a block
    shared = [5, 6, 7, 8]
    assert balancer.choose(shared + [1]) == 0  # least loaded (a tie: the first)
    assert balancer.choose(shared + [2]) == 0  # the block is there: 2 against 1, in slack
    assert balancer.choose(shared + [3]) == 1  # 3 against 1 is beyond the slack
    assert balancer.choose(shared + [4]) == 1  # the block follows the core that took it last
    assert balancer.load == [3, 3, 1]
    balancer.finished(1)
    balancer.finished(1)
    assert balancer.load == [3, 1, 1]


def test_llm_refuses_several_engine_cores(tmp_path: Path) -> None:
    path = make_checkpoint(tmp_path, tiny_configs()["llama"])
    with pytest.raises(ValueError, match="data_parallel_size > 1 runs engine cores in "
                                         "processes of their own"):
        LLM(str(path), device="cpu", data_parallel_size=2)


def _engine(path: Path, **options: object) -> AsyncLLM:
    return AsyncLLM(EngineConfig.from_kwargs(
        model=str(path), dtype="float32", device="cpu", data_parallel_size=2, block_size=4,
        max_num_batched_tokens=8, num_kv_blocks=14, **options))


async def _generate_all(engine: AsyncLLM, prompts: list[list[int]], tag: str) -> list[list[int]]:
    async def one(i: int, prompt: list[int]) -> list[int]:
        outputs = [o async for o in engine.generate(prompt, GREEDY, f"{tag}-{i}")]
        return outputs[-1].outputs[0].token_ids

    return list(await asyncio.gather(*(one(i, p) for i, p in enumerate(prompts))))


@pytest.mark.parametrize("arch", list(tiny_configs()))
def test_two_cores_share_the_work_and_give_hf_greedy_tokens(arch: str, tmp_path: Path) -> None:
    path = make_checkpoint(tmp_path, tiny_configs()[arch])
    mixed = _prompts(1, [3, 17, 9, 30, 1, 12])
    shared = _prompts(2, [5, 9, 2, 7], prefix=_prompts(3, [21])[0])
    expected = hf_greedy(path, mixed + shared, NEW_TOKENS)
    engine = _engine(path)
    try:
        assert engine.info["data_parallel_size"] == 2
        assert asyncio.run(_generate_all(engine, mixed, "mixed")) == expected[: len(mixed)]
        per_core = asyncio.run(engine.core_stats())
        assert all(s.prefix_cache_queries > 0 for s in per_core)  # both cores served
        assert sum(s.num_preemptions for s in per_core) > 0  # 14 blocks each: too few
        assert asyncio.run(_generate_all(engine, shared[:1], "warm")) == expected[len(mixed):][:1]
        hits = [s.prefix_cache_hits for s in asyncio.run(engine.core_stats())]
        assert asyncio.run(_generate_all(engine, shared, "shared")) == expected[len(mixed):]
        after = [s.prefix_cache_hits for s in asyncio.run(engine.core_stats())]
        gained = [a - b for a, b in zip(after, hits)]
        # The shared 21-token prefix: 5 full blocks, found again by each request on the
        # core that cached it; load may send the last ones to the other core.
        assert max(gained) >= 2 * 20
        assert asyncio.run(engine.stats()).num_running == 0
    finally:
        engine.shutdown()


def test_a_dead_core_ends_the_engine(tmp_path: Path) -> None:
    path = make_checkpoint(tmp_path, tiny_configs()["llama"])
    engine = _engine(path)
    try:
        psutil.Process(engine.core_pids[1]).kill()
        deadline = time.monotonic() + 10
        while engine.supervisor.is_healthy and time.monotonic() < deadline:
            time.sleep(0.05)
        health = engine.supervisor
        assert not health.is_healthy and "engine core died" in health.dead_reason
        with pytest.raises(EngineDeadError):
            asyncio.run(_generate_all(engine, _prompts(4, [5]), "late"))
    finally:
        engine.shutdown()
    assert not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"
                   for pid in engine.core_pids if pid is not None)
