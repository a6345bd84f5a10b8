"""Restarting dead engine cores (`AsyncLLM(restart_engine=True)`), one core at a time:
with two cores, a killed one fails only its own requests (retryably) while the other
keeps serving, and its successor gives the same greedy tokens; past the restart budget,
a death ends the engine as it does without restarts."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import psutil
import pytest

from pagoda import SamplingParams
from pagoda.config import EngineConfig
from pagoda.frontend.async_llm import AsyncLLM, EngineDeadError, EngineRestartingError
from pagoda.frontend.restarts import RestartBudget
from tests.engine.tiny_models import make_checkpoint, tiny_configs

GREEDY = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True)
LONG = SamplingParams(temperature=0.0, max_tokens=400, ignore_eos=True)
PROMPTS = [[5, 6, 7], [9, 10], [11, 12, 13, 14], [20]]


def test_budget_allows_a_few_restarts_within_the_window() -> None:
    budget = RestartBudget(max_restarts=2, window_s=10.0)
    assert budget.take(0.0) and budget.take(1.0)
    assert not budget.take(2.0)  # a third within 10 s: a crash loop
    assert budget.take(10.5)  # the first has left the window


async def _greedy(engine: AsyncLLM, tag: str) -> list[list[int]]:
    async def one(i: int, prompt: list[int]) -> list[int]:
        outputs = [o async for o in engine.generate(prompt, GREEDY, f"{tag}-{i}")]
        return outputs[-1].outputs[0].token_ids

    return list(await asyncio.gather(*(one(i, p) for i, p in enumerate(PROMPTS))))


async def _long(engine: AsyncLLM, request_id: str, prompt: list[int]) -> object:
    """The long request's final token count, or the error it ended with."""
    try:
        outputs = [o async for o in engine.generate(prompt, LONG, request_id)]
    except EngineDeadError as exc:
        return exc
    return len(outputs[-1].outputs[0].token_ids)


async def _kill_core_under_load(engine: AsyncLLM, core: int) -> list[object]:
    """Two long requests (one a core), then `core` killed while they run."""
    tasks = [asyncio.ensure_future(_long(engine, f"long-{i}", [30 + i, 31, 32]))
             for i in range(2)]
    deadline = time.monotonic() + 30
    while sum(s.num_running for s in await engine.core_stats()) < 2:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.01)
    psutil.Process(engine.core_pids[core]).kill()
    while not engine.supervisor.restarting_cores:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.01)
    health = engine.supervisor
    assert health.is_healthy and health.restarting_cores == [core]  # the other one serves
    during = await _greedy(engine, "during")
    results = await asyncio.gather(*tasks)
    return [during, *results]


def _wait_restarted(engine: AsyncLLM) -> None:
    deadline, health = time.monotonic() + 120, engine.supervisor
    while health.restarting_cores:
        assert time.monotonic() < deadline and not health.errored, health.dead_reason
        time.sleep(0.1)


def test_a_killed_core_is_replaced_while_the_other_serves(tmp_path: Path) -> None:
    path = make_checkpoint(tmp_path, tiny_configs()["llama"])
    engine = AsyncLLM(EngineConfig.from_kwargs(
        model=str(path), dtype="float32", device="cpu", data_parallel_size=2, block_size=4),
        restart_engine=True, restart_budget=RestartBudget(max_restarts=1))
    try:
        before = asyncio.run(_greedy(engine, "before"))
        old_pids = list(engine.core_pids)
        during, *longs = asyncio.run(_kill_core_under_load(engine, 1))
        assert during == before  # served by core 0 alone
        assert sorted(map(type, longs), key=str) == sorted([int, EngineRestartingError],
                                                          key=str), longs
        assert LONG.max_tokens in longs  # core 0's request finished
        _wait_restarted(engine)
        assert engine.core_pids[0] == old_pids[0] and engine.core_pids[1] != old_pids[1]
        assert asyncio.run(_greedy(engine, "after")) == before
        stats = asyncio.run(engine.core_stats())
        assert len(stats) == 2 and all(s.prefix_cache_queries > 0 for s in stats)

        psutil.Process(engine.core_pids[0]).kill()  # past the budget of one restart
        deadline = time.monotonic() + 10
        while not engine.supervisor.errored and time.monotonic() < deadline:
            time.sleep(0.05)
        assert engine.supervisor.errored and "not restarted" in engine.supervisor.dead_reason
        with pytest.raises(EngineDeadError) as caught:
            asyncio.run(_greedy(engine, "late"))
        assert not isinstance(caught.value, EngineRestartingError)
    finally:
        engine.shutdown()
    assert not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"
                   for pid in engine.core_pids if pid is not None)
