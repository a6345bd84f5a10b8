"""Decode graphs' padding and static buffers, on the CPU.

The CPU has no device graphs, so a stand-in "graph" replays by calling the captured
function again: it reads the same static buffers a real replay would, which is what the
padding logic must get right. The CUDA tests run the real thing.
"""

from __future__ import annotations

import random
from collections import Counter

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
    graphs = DecodeGraphs(worker.model, runner.kv_caches, runner.builder, capture,
                          [2, 8], max_blocks_per_seq=40, block_size=4,
                          device=runner.device)
    graphs.capture_all()
    runner.graphs = [graphs]
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
    graphs = DecodeGraphs(worker.model, runner.kv_caches, runner.builder, capture,
                          [1, 2], max_blocks_per_seq=4, block_size=4,
                          device=runner.device)
    graphs.capture_all()
    runner.graphs = [graphs]
    # Three sequences (more than the largest graph), prompts longer than one token, and
    # contexts beyond 4 blocks all run eagerly, with the same tokens.
    prompts = [[7] * 3, [9] * 20, [11] * 6]
    params = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True)
    outputs = llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
    assert [o.outputs[0].token_ids for o in outputs] == hf_greedy(path, prompts, 6)
    assert graphs.padded_size(3) is None and graphs.padded_size(2) == 2


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


def capture_graphs(llm: LLM, monkeypatch, max_blocks: int = 32) -> Counter:
    """Capture `llm`'s graphs (an engine started with enforce_eager) through its worker's
    own `_capture_graphs`, with the stand-in capture above; returns the replays each
    family gets, by (runner class, tokens a sequence)."""
    worker = llm.engine.core.executor.worker
    monkeypatch.setattr(worker.platform, "graph_capture", RerunCapture)
    monkeypatch.setattr(worker.config, "enforce_eager", False)
    runner = worker.runner
    worker._capture_graphs(max_blocks)
    replays: Counter = Counter()
    for who in (runner, runner.drafter):
        for graphs in who.graphs if who is not None else []:
            def run(inputs, graphs=graphs, run=graphs.run, who=type(who).__name__):
                replays[who, graphs.query_len] += 1
                return run(inputs)
            graphs.run = run
    return replays


@pytest.mark.parametrize("method", ["ngram", "draft"])
def test_verify_steps_replay_graphs_of_several_tokens(tmp_path, monkeypatch,
                                                      method: str) -> None:
    """With speculation, steps that verify drafts replay graphs of 1 + k tokens a sequence
    (requests with fewer drafts than k, or none, share them with padding sequences) and
    the greedy tokens stay HF's; with a draft model its catch-up forwards do too. (The
    reference backend reads only the metadata's tensors: declared able to replay here;
    tests/kernels/test_engine_with_triton_kernels.py runs the Triton backend so.)"""
    from pagoda.attention.reference import ReferenceAttentionBackend
    from tests.engine.test_speculative import GREEDY, NEW_TOKENS, PROMPTS, SPECULATIVE

    path = make_checkpoint(tmp_path, tiny_configs()["llama"])
    options = dict(SPECULATIVE) if method == "ngram" else {
        "speculative_method": "draft", "speculative_model": str(path),
        "num_speculative_tokens": 3}
    monkeypatch.setattr(ReferenceAttentionBackend, "supports_graph_capture", True)
    monkeypatch.setattr(ReferenceAttentionBackend, "supports_multi_token_graphs", True)
    llm = LLM(str(path), device="cpu", dtype="float32", attention_backend="reference",
              num_kv_blocks=128, block_size=4, enforce_eager=True, graph_batch_sizes=[1, 2, 4],
              **options)
    replays = capture_graphs(llm, monkeypatch)
    runner = llm.engine.core.executor.worker.runner
    assert [(g.query_len, g.sizes) for g in runner.graphs] == [(1, [1, 2, 4]),
                                                                (4, [4, 8, 16])]
    outputs = llm.generate([{"prompt_token_ids": p} for p in PROMPTS], GREEDY, use_tqdm=False)
    assert [o.outputs[0].token_ids for o in outputs] == hf_greedy(path, PROMPTS, NEW_TOKENS)
    assert sum(int(o.metrics.get("spec_accepted_tokens", 0)) for o in outputs) > 0
    assert replays["ModelRunner", 4] >= NEW_TOKENS // 4
    if method == "draft":
        assert replays["DraftRunner", 1] > 0 and replays["DraftRunner", 4] > 0
    assert llm.engine.core.stats().kv_cache_usage == 0.0
