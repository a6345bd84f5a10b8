"""Decode graphs' padding and static buffers, on the CPU.

The CPU has no device graphs, so a stand-in "graph" replays by calling the captured
function again: it reads the same static buffers a real replay would, which is what the
padding logic must get right. The CUDA tests run the real thing.
"""

from __future__ import annotations

import random

import pytest

from pagoda import LLM, SamplingParams
from pagoda.worker.decode_graphs import DecodeGraphs, default_capture_sizes
from tests.engine.tiny_models import VOCAB, hf_greedy, make_checkpoint, tiny_configs


class RerunCapture:
    """A GraphCapture whose replay re-runs the function into the captured outputs."""

    def __init__(self) -> None:
        self.replays = 0

    def new_pool(self) -> None:
        return None

    def capture(self, fn, pool):
        out = fn()

        def replay() -> None:
            self.replays += 1
            out.copy_(fn())

        return replay, out


def test_default_capture_sizes() -> None:
    sizes = default_capture_sizes(256)
    assert sizes[:5] == [1, 2, 4, 8, 16] and sizes[-1] == 256
    assert sizes == sorted(set(sizes))
    assert all(b - a <= max(8, a // 8) for a, b in zip(sizes, sizes[1:]))  # padding <= 1/8
    assert default_capture_sizes(5) == [1, 2, 4, 5]
    assert default_capture_sizes(1000)[-1] == 1000


@pytest.mark.parametrize("overlap", [False, True])
def test_padded_graph_replays_match_hf(tmp_path, overlap: bool) -> None:
    path = make_checkpoint(tmp_path, tiny_configs()["qwen3"])
    rng = random.Random(3)
    prompts = [[rng.randrange(3, VOCAB) for _ in range(n)] for n in (5, 17, 2, 30, 9)]
    expected = hf_greedy(path, prompts, 10)
    llm = LLM(str(path), device="cpu", dtype="float32", attention_backend="reference",
              num_kv_blocks=64, block_size=4, async_scheduling=overlap)
    worker = llm.engine.core.executor.worker
    runner = worker.runner
    capture = RerunCapture()
    # Sizes 2 and 8 only: five sequences pad to 8, then to 2 as they finish at different times.
    runner.graphs = DecodeGraphs(worker.model, runner.kv_caches, runner.builder, capture,
                                 [2, 8], max_blocks_per_seq=40, block_size=4,
                                 device=runner.device)
    runner.graphs.capture_all()
    params = [SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True)
              for n in (10, 10, 10, 10, 10)]
    outputs = llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
    assert [o.outputs[0].token_ids for o in outputs] == expected
    assert capture.replays >= 9  # every decode step of the batch went through a graph
    assert llm.engine.core.stats().kv_cache_usage == 0.0


def test_graphs_refuse_steps_they_cannot_run(tmp_path) -> None:
    path = make_checkpoint(tmp_path, tiny_configs()["llama"])
    llm = LLM(str(path), device="cpu", dtype="float32", attention_backend="reference",
              num_kv_blocks=64, block_size=4)
    worker = llm.engine.core.executor.worker
    runner = worker.runner
    capture = RerunCapture()
    runner.graphs = DecodeGraphs(worker.model, runner.kv_caches, runner.builder, capture,
                                 [1, 2], max_blocks_per_seq=4, block_size=4,
                                 device=runner.device)
    runner.graphs.capture_all()
    # Three sequences (more than the largest graph), prompts longer than one token, and
    # contexts beyond 4 blocks all run eagerly, with the same tokens.
    prompts = [[7] * 3, [9] * 20, [11] * 6]
    params = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True)
    outputs = llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
    assert [o.outputs[0].token_ids for o in outputs] == hf_greedy(path, prompts, 6)
    assert runner.graphs.padded_size(3) is None and runner.graphs.padded_size(2) == 2


@pytest.mark.parametrize(("options", "field"), [
    ({"gpu_memory_utilization": 1.5}, "gpu_memory_utilization"),
    ({"gpu_memory_utilization": 0.0}, "gpu_memory_utilization"),
    ({"graph_batch_sizes": [0, 8]}, "graph_batch_sizes"),
    ({"graph_batch_sizes": []}, "graph_batch_sizes"),
])
def test_engine_options_are_validated(options: dict, field: str) -> None:
    from pagoda.config import EngineConfig

    with pytest.raises(ValueError, match=field):
        EngineConfig.from_kwargs(**options)


def test_cli_parses_graph_and_memory_options() -> None:
    import argparse

    from pagoda.cli.engine_args import add_engine_arguments, engine_config

    parser = argparse.ArgumentParser()
    add_engine_arguments(parser)
    args = parser.parse_args(["m", "--gpu-memory-utilization", "0.7", "--enforce-eager",
                              "--graph-batch-sizes", "1,2,8", "--no-async-scheduling"])
    config = engine_config(args)
    assert (config.cache.gpu_memory_utilization, config.enforce_eager,
            config.graph_batch_sizes, config.scheduler.async_scheduling) == (0.7, True,
                                                                            [1, 2, 8], False)
    with pytest.raises(SystemExit):
        parser.parse_args(["m", "--graph-batch-sizes", "1,x"])
