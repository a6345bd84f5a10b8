"""End to end: a tiny model generates greedily the same tokens on a platform as on the CPU.

Everything the engine does runs on the platform under test: loading, its attention backend
and kernels, the paged KV cache, chunked prefill mixed with decodes (the token budget is
smaller than the prompts), sampling. The prompts go through once one at a time and once all
together, so the platform must agree with the CPU in more than one batch shape.
"""

from __future__ import annotations

import random
from pathlib import Path

import torch

from pagoda.entrypoints.llm import LLM
from pagoda.platforms.platform import Platform
from pagoda.sampling_params import SamplingParams
from pagoda.testing.report import ConformanceReport
from pagoda.testing.tiny_model import VOCAB_SIZE
from pagoda.testing.tolerances import DTYPES, dtype_name

REFERENCE_DEVICE = "cpu"
PROMPT_LENGTHS = (8, 5, 11, 7)
NEW_TOKENS = 8
BATCH_SIZES = (1, len(PROMPT_LENGTHS))
ENGINE_OPTIONS = {"num_kv_blocks": 64, "max_num_batched_tokens": 16}
"""A small cache, and a token budget below the prompts' total: prefills are chunked and
share steps with decodes."""


def parity_dtype(platform: Platform) -> torch.dtype:
    """float32 when the platform has it, else its first supported kit dtype."""
    for dtype in DTYPES:
        if dtype in platform.supported_dtypes:
            return dtype
    raise ValueError(f"platform {platform.name!r} supports none of {DTYPES}")


def parity_prompts(seed: int) -> list[str]:
    """Text prompts of PROMPT_LENGTHS random words of the tiny model's tokenizer."""
    rng = random.Random(seed)
    return [" ".join(f"w{rng.randrange(3, VOCAB_SIZE)}" for _ in range(n))
            for n in PROMPT_LENGTHS]


def tiny_llm(model: Path, device: str, dtype: torch.dtype) -> LLM:
    return LLM(str(model), device=device, dtype=dtype_name(dtype), **ENGINE_OPTIONS)


def greedy_tokens(llm: LLM, prompts: list[str], batch_size: int) -> list[list[int]]:
    """Each prompt's greedy continuation, generated `batch_size` prompts at a time."""
    params = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True)
    tokens = []
    for start in range(0, len(prompts), batch_size):
        outputs = llm.generate(prompts[start:start + batch_size], params, use_tqdm=False)
        tokens.extend(list(o.outputs[0].token_ids) for o in outputs)
    return tokens


def _difference(got: list[int], want: list[int]) -> str:
    first = next((i for i, (g, w) in enumerate(zip(got, want)) if g != w), min(len(got),
                                                                                len(want)))
    return f"first differs at token {first}: got {got}, expected {want}"


def check_greedy_parity(model: Path, device: str, dtype: torch.dtype, *,
                        seed: int = 0) -> ConformanceReport:
    """Compare `device`'s greedy tokens with the CPU's, for every batch size."""
    report = ConformanceReport(
        f"greedy tokens of a tiny model on {device!r} vs {REFERENCE_DEVICE!r} in "
        f"{dtype_name(dtype)} (seed {seed})")
    prompts = parity_prompts(seed)
    reference, tested = (tiny_llm(model, d, dtype) for d in (REFERENCE_DEVICE, device))
    for batch_size in BATCH_SIZES:
        case = f"{len(prompts)} prompts, batch size {batch_size}"
        want = greedy_tokens(reference, prompts, batch_size)
        got = greedy_tokens(tested, prompts, batch_size)
        problems = [f"prompt {i}: {_difference(g, w)}"
                    for i, (g, w) in enumerate(zip(got, want, strict=True)) if g != w]
        if problems:
            report.failures.append(f"{case}: " + "; ".join(problems))
        else:
            report.checked.append(case)
    return report
