"""LoRA on an NVIDIA GPU (run by ci/gpu.sh): the Triton LoRA pair drives the engine, with
decode graphs and overlapped steps, and gives the CPU platform's greedy tokens for a batch
mixing three adapters and the base model (two slots: adapters swap), with chunked
prefill; in bfloat16 it runs."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

pytest.importorskip("pagoda_cuda", reason="pagoda-cuda is not installed")

from pagoda import LLM, LoRARequest, SamplingParams  # noqa: E402
from pagoda.testing.lora_adapter import write_random_adapter  # noqa: E402
from tests.engine.tiny_models import VOCAB, make_checkpoint, tiny_configs  # noqa: E402

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(),
                       reason="needs an NVIDIA GPU, its driver and a CUDA build of torch "
                              "(run ci/gpu.sh on a GPU machine)"),
]
GREEDY = SamplingParams(temperature=0.0, max_tokens=10, ignore_eos=True)


def _run(llm: LLM, prompts: list[list[int]], loras: list[LoRARequest | None]) -> list:
    outputs = llm.generate([{"prompt_token_ids": p} for p in prompts], GREEDY, use_tqdm=False,
                           lora_request=loras)
    return [o.outputs[0].token_ids for o in outputs]


def test_mixed_adapters_match_cpu(tmp_path: Path) -> None:
    config = tiny_configs()["llama"]
    path = str(make_checkpoint(tmp_path / "base", config))
    adapters = [LoRARequest(f"a{i}", i + 1, str(write_random_adapter(
        config, tmp_path / f"a{i}", rank=4 * (i + 1), seed=i, b_scale=0.3)))
        for i in range(3)]
    rng = random.Random(1)
    base_prompts = [[rng.randrange(3, VOCAB) for _ in range(n)] for n in (3, 17, 9, 30, 1)]
    prompts = [p for p in base_prompts for _ in range(4)]
    loras = [*adapters, None] * len(base_prompts)
    common = dict(dtype="float32", num_kv_blocks=256, block_size=16, max_num_batched_tokens=32,
                  enable_lora=True, max_loras=2, max_lora_rank=16)
    gpu = LLM(path, device="cuda", **common)
    info = gpu.engine.core.info
    assert info["ops"]["lora_shrink"].endswith("/triton")
    assert info["graph_batch_sizes"] and info["async_scheduling"]
    on_gpu = _run(gpu, prompts, loras)
    assert on_gpu == _run(LLM(path, device="cpu", **common), prompts, loras)
    assert on_gpu[0] != on_gpu[3]  # the adapters change the tokens


def test_bfloat16_with_adapters(tmp_path: Path) -> None:
    config = tiny_configs()["qwen3"]
    path = str(make_checkpoint(tmp_path / "base", config))
    lora = LoRARequest("a", 1, str(write_random_adapter(config, tmp_path / "a", rank=16,
                                                         seed=0, dtype=torch.bfloat16)))
    llm = LLM(path, device="cuda", dtype="bfloat16", num_kv_blocks=64, enable_lora=True)
    tokens = _run(llm, [[5, 6, 7]] * 2, [lora, None])
    assert all(len(t) == GREEDY.max_tokens for t in tokens)
