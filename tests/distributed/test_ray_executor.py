"""The Ray executor on a local Ray cluster of CPU workers started here: the same workers
as Ray actors give HF's greedy tokens (tensor and pipeline parallel), and an actor that
dies ends the next step, and wakes an idle engine, within seconds."""

from __future__ import annotations

import os
import random
import signal
import time
from collections.abc import Iterator
from multiprocessing.connection import wait
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from pagoda import LLM, SamplingParams  # noqa: E402
from pagoda.executor import WorkerDiedError  # noqa: E402
from tests.engine.tiny_models import VOCAB, hf_greedy, make_checkpoint, tiny_configs  # noqa: E402

GREEDY = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True)


@pytest.fixture(scope="module")
def cluster() -> Iterator[None]:
    """Four logical CPUs on this host: one bundle per worker of TP=2 x PP=2."""
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def qwen2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_checkpoint(tmp_path_factory.mktemp("qwen2"), tiny_configs()["qwen2"])


def _generate(llm: LLM, prompts: list[list[int]]) -> list[list[int]]:
    outputs = llm.generate([{"prompt_token_ids": p} for p in prompts], GREEDY, use_tqdm=False)
    return [o.outputs[0].token_ids for o in outputs]


@pytest.mark.usefixtures("cluster")
@pytest.mark.parametrize("layout", [{"tensor_parallel_size": 2},
                                    {"tensor_parallel_size": 2, "pipeline_parallel_size": 2}],
                         ids=["tp2", "tp2-pp2"])
def test_ray_actors_generate_hf_greedy_tokens(qwen2: Path, layout: dict[str, int]) -> None:
    rng = random.Random(7)
    prompts = [[rng.randrange(3, VOCAB) for _ in range(n)] for n in (3, 17, 9, 30, 1)]
    llm = LLM(str(qwen2), dtype="float32", device="cpu", distributed_executor_backend="ray",
              max_num_batched_tokens=8, num_kv_blocks=14, block_size=4, **layout)
    try:
        assert _generate(llm, prompts) == hf_greedy(qwen2, prompts, GREEDY.max_tokens)
        assert llm.engine.core.stats().num_preemptions > 0
    finally:
        llm.engine.shutdown()
    assert ray.is_initialized()  # the cluster was the test's: left running


@pytest.mark.usefixtures("cluster")
def test_bitmasks_sent_after_the_launch_reach_the_actors(tmp_path: Path) -> None:
    """Pipeline stages overlap steps, so a step's token bitmask (here: forced tokens of a
    spent thinking budget) goes to the actors after the step's launch."""
    llama = make_checkpoint(tmp_path, tiny_configs()["llama"])  # (its tokenizer spells w7)
    prompts = [[5, 6, 7], [40, 41, 42, 43, 44]]
    free = hf_greedy(llama, prompts, 6)
    llm = LLM(str(llama), dtype="float32", device="cpu", distributed_executor_backend="ray",
              pipeline_parallel_size=2, num_kv_blocks=32, block_size=4)
    try:
        assert llm.engine.core.depth == 1
        budgeted = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True,
                                  thinking_budget=2, thinking_end="w7 w9")
        for output, expected in zip(llm.generate([{"prompt_token_ids": p} for p in prompts],
                                                 budgeted, use_tqdm=False), free):
            tokens = output.outputs[0].token_ids
            assert tokens[:2] == expected[:2] and tokens[2:4] == [7, 9], (tokens, expected)
    finally:
        llm.engine.shutdown()


@pytest.mark.usefixtures("cluster")
def test_a_killed_actor_ends_the_step_and_wakes_an_idle_engine(qwen2: Path) -> None:
    llm = LLM(str(qwen2), dtype="float32", device="cpu", distributed_executor_backend="ray",
              tensor_parallel_size=2, num_kv_blocks=32)
    executor = llm.engine.core.executor
    try:
        _generate(llm, [[5, 6, 7]])
        os.kill(executor.pids[1], signal.SIGKILL)
        start = time.monotonic()
        assert wait(executor.health_handles(), timeout=10), "the monitor did not notice"
        with pytest.raises(WorkerDiedError, match=r"worker rank 1 \(Ray actor, pid \d+\) died"):
            executor.check_health()
        with pytest.raises(WorkerDiedError, match=r"worker rank 1 \(Ray actor\) died"):
            _generate(llm, [[5, 6, 7]])
        assert time.monotonic() - start < 10
    finally:
        llm.engine.shutdown()
