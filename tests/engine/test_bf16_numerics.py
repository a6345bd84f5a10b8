"""Numerical trust in bfloat16: Pagoda's bf16 log-probabilities are no further from a
float32 reference than HF transformers' own bf16 ones are (mean KL divergence, top-1
agreement), on the same tiny models (random O(0.1) weights) and prompts."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from pagoda import LLM, SamplingParams
from tests.engine.tiny_models import VOCAB, make_checkpoint, tiny_configs

PROMPTS = [[random.Random(seed).randrange(3, VOCAB) for _ in range(40)] for seed in range(3)]
KL_MARGIN = 1.5
"""Pagoda's mean KL may be this many times HF's (bf16 rounding differs by op order)."""
KL_FLOOR = 1e-5
TOP1_MARGIN = 0.05


def _hf_logprobs(path: Path, dtype: torch.dtype) -> list[torch.Tensor]:
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).eval()
    with torch.inference_mode():
        return [model(torch.tensor([p])).logits[0, :-1].float().log_softmax(-1)
                for p in PROMPTS]


def _pagoda_logprobs(path: Path, device: str) -> list[torch.Tensor]:
    llm = LLM(str(path), dtype="bfloat16", device=device, num_kv_blocks=64,
              enable_prefix_caching=False)
    params = SamplingParams(max_tokens=1, prompt_logprobs=VOCAB, detokenize=False)
    rows = []
    for out in llm.generate([{"prompt_token_ids": p} for p in PROMPTS], params,
                            use_tqdm=False):
        table = torch.full((len(out.prompt_logprobs) - 1, VOCAB), float("-inf"))
        for pos, entry in enumerate(out.prompt_logprobs[1:]):
            table[pos, entry.token_ids] = torch.tensor(entry.logprobs)
        rows.append(table)
    llm.engine.shutdown()
    return rows


def _distance(ref: list[torch.Tensor], got: list[torch.Tensor]) -> tuple[float, float]:
    """(mean KL(ref || got) over positions, fraction of positions with the same top token)."""
    ref_t, got_t = torch.cat(ref), torch.cat(got)
    kl = (ref_t.exp() * (ref_t - got_t)).sum(-1).mean().item()
    top1 = (ref_t.argmax(-1) == got_t.argmax(-1)).float().mean().item()
    return kl, top1


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3"])
def test_bf16_is_as_close_to_float32_as_hf(arch: str, tmp_path: Path,
                                           device: str = "cpu") -> None:
    path = make_checkpoint(tmp_path, tiny_configs()[arch], random_weights=True)
    reference = _hf_logprobs(path, torch.float32)
    hf_kl, hf_top1 = _distance(reference, _hf_logprobs(path, torch.bfloat16))
    our_kl, our_top1 = _distance(reference, _pagoda_logprobs(path, device))
    assert hf_kl > 0  # bf16 differs at all: the comparison means something
    assert our_kl <= KL_MARGIN * hf_kl + KL_FLOOR, (our_kl, hf_kl)
    assert our_top1 >= hf_top1 - TOP1_MARGIN, (our_top1, hf_top1)
