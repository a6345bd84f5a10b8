"""The Triton `lora_shrink` and `lora_expand` kernels match core's references.

In the CPU interpreter bfloat16 is left out (its float32 -> bfloat16 conversion truncates,
FACTS.md); on a GPU every dtype is checked."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("triton")

from pagoda.kernels.triton.lora import lora_expand, lora_shrink  # noqa: E402
from pagoda.testing import DTYPES, check_op, dtype_name  # noqa: E402


def _dtypes() -> list[torch.dtype]:
    return DTYPES if torch.cuda.is_available() else [torch.float32, torch.float16]


@pytest.mark.parametrize("dtype", _dtypes(), ids=dtype_name)
@pytest.mark.parametrize(("op", "impl"), [
    ("lora_shrink", lora_shrink),
    ("lora_shrink", functools.partial(lora_shrink, num_splits=4)),  # K in parts, then summed
    ("lora_expand", lora_expand)], ids=["shrink", "shrink-split-k", "expand"])
def test_kernel_matches_reference(op: str, impl: object, dtype: torch.dtype,
                                  device: str) -> None:
    report = check_op(op, impl, dtype, device=device, seed=5)
    report.raise_for_failures()
    assert report.checked and not report.skipped


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU the kernel tests compile them")
def test_kernels_compile_for_sm90() -> None:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    script = Path(__file__).with_name("compile_lora_sm90.py")
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                            env=env, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("ok ") == 16, result.stdout


def test_engine_with_the_triton_lora_kernels(device: str, tmp_path) -> None:
    """A tiny Llama serving two adapters and the base model in one batch (chunked prefill
    among decodes) gives the same greedy tokens with the Triton pair as with the
    reference (here in Triton's CPU interpreter)."""
    if device != "cpu":
        pytest.skip("on a GPU, the lead's H200 run covers the engine with these kernels")
    pytest.importorskip("peft")
    from pagoda import LLM, LoRARequest, SamplingParams
    from pagoda.plugins import KernelProvider, get_registries, reset_registries
    from tests.engine.lora_adapters import make_adapter
    from tests.engine.tiny_models import make_checkpoint, tiny_configs

    base = make_checkpoint(tmp_path / "base", tiny_configs()["llama"])
    loras = [LoRARequest(f"a{i}", i + 1, str(make_adapter(
        base, tmp_path / f"a{i}", rank=4 * (i + 1), alpha=8, targets="all-linear", seed=i)))
        for i in range(2)]
    prompts = [[5, 9, 13], [40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50], [7]]
    greedy = SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True)

    def run() -> tuple[list[list[int]], dict]:
        llm = LLM(str(base), device="cpu", dtype="float32", enable_lora=True, max_loras=2,
                  max_lora_rank=8, num_kv_blocks=64, block_size=8, max_num_batched_tokens=16)
        outputs = llm.generate([{"prompt_token_ids": p} for p in prompts for _ in range(3)],
                               greedy, use_tqdm=False,
                               lora_request=[*loras, None] * len(prompts))
        return [o.outputs[0].token_ids for o in outputs], llm.engine.core.info

    expected, _ = run()
    regs = get_registries()
    try:
        for op in ("lora_shrink", "lora_expand"):
            regs.kernels.add(KernelProvider(op, "triton", f"pagoda.kernels.triton:{op}",
                                            ("cpu",), priority=100), "test")
        tokens, info = run()
        assert info["ops"]["lora_shrink"] == info["ops"]["lora_expand"] == "test/triton"
        assert tokens == expected
    finally:
        reset_registries()


def _variants(kernel: object) -> int:
    """Compiled variants Triton holds of `kernel` on the current GPU."""
    return len(kernel.device_caches[torch.cuda.current_device()][0])


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="compiled kernels need a CUDA GPU")
def test_one_compiled_variant_serves_every_step_size() -> None:
    """Steps of 65 to 1000 tokens (one row block) and K of 4096 compile each kernel of
    the pair once: the token count and the shrink's split count change from step to step,
    and a compile in the middle of a serving run stalls every request for a second."""
    import numpy as np

    from pagoda.kernels.triton.gemv import _sum_splits_kernel
    from pagoda.kernels.triton.lora import _lora_expand_kernel, _lora_shrink_kernel
    from pagoda.ops.lora_reference import group_by_slot

    num_slots, rank, k, n = 4, 16, 4096, 256
    gen = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(num_slots, rank, k, device="cuda", generator=gen).bfloat16()
    b = torch.randn(num_slots, rank, n, device="cuda", generator=gen).bfloat16()
    seen = None
    for tokens in (65, 100, 257, 640, 1000):
        slots = np.arange(tokens, dtype=np.int32) % (num_slots + 1) - 1
        order, tiles = (torch.from_numpy(t).cuda() for t in group_by_slot(slots, num_slots))
        slots_d = torch.from_numpy(slots).cuda()
        x = torch.randn(tokens, k, device="cuda", generator=gen).bfloat16()
        h = lora_shrink(x, a, slots_d, order, tiles)
        lora_expand(torch.zeros(tokens, n, device="cuda").bfloat16(), h, b, slots_d, order,
                    tiles)
        counts = tuple(map(_variants, (_lora_shrink_kernel, _lora_expand_kernel,
                                       _sum_splits_kernel)))
        assert seen is None or counts == seen, (tokens, counts, seen)
        seen = counts
