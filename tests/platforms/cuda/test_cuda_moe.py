"""Mixture-of-experts models on an NVIDIA GPU (run by ci/gpu.sh): HF transformers' greedy
tokens with the Triton `fused_moe` kernel, decode graphs and overlapped steps included;
launching an MoE step never waits for the GPU."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

pytest.importorskip("pagoda_cuda", reason="pagoda-cuda is not installed")

from pagoda import LLM, SamplingParams  # noqa: E402
from tests.engine.tiny_models import VOCAB, hf_greedy  # noqa: E402
from tests.engine.tiny_moe_models import make_moe_checkpoint, tiny_moe_configs  # noqa: E402

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(),
                       reason="needs an NVIDIA GPU, its driver and a CUDA build of torch "
                              "(run ci/gpu.sh on a GPU machine)"),
]

GREEDY = SamplingParams(temperature=0.0, max_tokens=10, ignore_eos=True)


def _prompts(seed: int, lengths: list[int]) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(3, VOCAB) for _ in range(n)] for n in lengths]


def _greedy(llm: LLM, prompts: list[list[int]]) -> list[list[int]]:
    outputs = llm.generate([{"prompt_token_ids": p} for p in prompts], GREEDY, use_tqdm=False)
    return [o.outputs[0].token_ids for o in outputs]


@pytest.mark.parametrize("arch", list(tiny_moe_configs()))
def test_greedy_tokens_match_hf_with_graphs(arch: str, tmp_path: Path) -> None:
    """float32; five sequences pad to a decode graph of 8; prefills chunk among decodes."""
    path = make_moe_checkpoint(tmp_path, tiny_moe_configs()[arch])
    prompts = _prompts(1, [3, 17, 9, 30, 1])
    llm = LLM(str(path), device="cuda", dtype="float32", num_kv_blocks=256, block_size=16,
              max_num_batched_tokens=32)
    info = llm.engine.core.info
    assert info["ops"]["fused_moe"] == "cuda/triton" and 8 in info["graph_batch_sizes"]
    assert _greedy(llm, prompts) == hf_greedy(path, prompts, GREEDY.max_tokens)


def test_bfloat16_graphs_match_eager_steps(tmp_path: Path) -> None:
    path = str(make_moe_checkpoint(tmp_path, tiny_moe_configs()["qwen3_moe"]))
    prompts = _prompts(2, [3, 40, 9, 1, 12])
    fast = LLM(path, device="cuda", dtype="bfloat16", num_kv_blocks=256)
    eager = LLM(path, device="cuda", dtype="bfloat16", num_kv_blocks=256, enforce_eager=True,
                async_scheduling=False)
    assert _greedy(fast, prompts) == _greedy(eager, prompts)


def test_launching_an_moe_step_does_not_wait_for_the_gpu(tmp_path: Path) -> None:
    """Eager steps (every kernel launched from Python), prefills and decodes: routing and
    the grouping of tokens by expert stay on the device."""
    path = str(make_moe_checkpoint(tmp_path, tiny_moe_configs()["qwen2_moe"]))
    llm = LLM(path, device="cuda", dtype="bfloat16", num_kv_blocks=64, enforce_eager=True)
    runner = llm.engine.core.executor.worker.runner
    launch, launched = runner.execute_model, []

    def strict_launch(step):
        torch.cuda.set_sync_debug_mode("error")
        try:
            out = launch(step)
        finally:
            torch.cuda.set_sync_debug_mode("default")
        launched.append(len(step.scheduled))
        return out

    runner.execute_model = strict_launch
    outs = _greedy(llm, _prompts(3, [12, 300]))
    assert [len(tokens) for tokens in outs] == [10, 10] and len(launched) >= 10
