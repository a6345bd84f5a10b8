"""A worker process that dies or fails never hangs the engine: a step, a start-up call and
an idle served engine each report which rank died, and why, within seconds."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import psutil
import pytest

from pagoda import LLM, SamplingParams
from pagoda.config import EngineConfig
from pagoda.executor import WorkerDiedError
from pagoda.frontend.async_llm import AsyncLLM, EngineDeadError
from tests.engine.tiny_models import make_checkpoint, tiny_configs

GREEDY = SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True)


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_checkpoint(tmp_path_factory.mktemp("llama"), tiny_configs()["llama"])


def test_a_killed_worker_fails_the_next_step_at_once(llama: Path) -> None:
    llm = LLM(str(llama), dtype="float32", device="cpu", tensor_parallel_size=2,
              num_kv_blocks=32)
    try:
        llm.generate([[5, 6, 7]], GREEDY, use_tqdm=False)  # both ranks work
        worker = llm.engine.core.executor.processes[1]
        os.kill(worker.pid, signal.SIGKILL)
        start = time.monotonic()
        with pytest.raises(WorkerDiedError, match=r"worker rank 1 \(pid \d+\) died "
                                                  r"\(exit code -9\)"):
            llm.generate([[5, 6, 7]], GREEDY, use_tqdm=False)
        assert time.monotonic() - start < 10
    finally:
        llm.engine.shutdown()
    assert not any(p.is_alive() for p in llm.engine.core.executor.processes)


def test_a_failing_worker_reports_its_traceback(llama: Path) -> None:
    """4 attention heads cannot split over 3 ranks: every rank fails loading the model."""
    with pytest.raises(WorkerDiedError, match="(?s)worker rank . failed: ValueError.*4 "
                                              "attention heads do not split over "
                                              "tensor_parallel_size 3.*Worker traceback"):
        LLM(str(llama), dtype="float32", device="cpu", tensor_parallel_size=3)


def test_an_idle_served_engine_notices_a_dead_worker(llama: Path) -> None:
    engine = AsyncLLM(EngineConfig.from_kwargs(model=str(llama), dtype="float32", device="cpu",
                                               tensor_parallel_size=2, num_kv_blocks=32))
    async def ask(request_id: str) -> list[int]:
        outputs = [o async for o in engine.generate([5, 6, 7], GREEDY, request_id)]
        return outputs[-1].outputs[0].token_ids

    try:
        assert len(asyncio.run(ask("before-death"))) == 4  # the two ranks serve
        workers = [p for p in psutil.Process(engine.core_pid).children()
                   if "spawn_main" in " ".join(p.cmdline())]  # not a resource tracker
        assert len(workers) == 2
        workers[0].kill()
        deadline = time.monotonic() + 10
        while engine.supervisor.is_healthy and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not engine.supervisor.is_healthy, "the engine did not notice within 10 s"
        reason = engine.supervisor.dead_reason
        assert "worker rank" in reason and "died" in reason

        with pytest.raises(EngineDeadError):
            asyncio.run(ask("after-death"))
    finally:
        engine.shutdown()
