"""W8A8 layers take their inputs quantized by the norm or the activation before them (the
ops of QUANT_INPUT_OPS, asked for by `KernelProvider.quantized_input`): a tiny Llama's
greedy tokens and logprobs are the same bit for bit with those ops offered and without,
with FP8 and INT8 weights quantized at load. Its prefill step has more rows than the W8A8
kernels quantize themselves (so the norms and the activation hand their output over
quantized), its decode steps fewer (so they do not). Triton's kernels serve as the CPU's
providers, in the interpreter; on a GPU, tests/platforms/cuda runs the CUDA platform's."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

pytest.importorskip("triton")

from pagoda import LLM  # noqa: E402
from pagoda.kernels.triton.launch import DEFAULT_LAUNCH  # noqa: E402
from pagoda.kernels.triton.launched import LaunchedKernels  # noqa: E402
from pagoda.plugins import KernelProvider, get_registries, reset_registries  # noqa: E402
from pagoda.plugins.specs import QUANT_INPUT_OPS  # noqa: E402
from tests.engine.fused_layers import greedy_logprobs  # noqa: E402
from tests.engine.tiny_models import VOCAB, make_checkpoint, wide_llama_config  # noqa: E402

KERNELS = LaunchedKernels(lambda device: DEFAULT_LAUNCH)
CALLS: Counter[str] = Counter()


def _counted(op: str) -> Callable[..., Any]:
    def call(*args: Any) -> Any:
        CALLS[op] += 1
        return getattr(KERNELS, op)(*args)

    return call


COUNTED = SimpleNamespace(**{op: _counted(op) for op in QUANT_INPUT_OPS})
"""The quantizing kernels, counting their calls (the providers' targets)."""

DENSE_OPS = ("linear", "rms_norm", "fused_add_rms_norm", "rotary_embedding", "silu_and_mul")
W8A8_OPS = {"fp8_linear": "fp8", "int8_linear": "int8"}
QUANT = "pagoda.kernels.triton.quant_linear"


def _register(quantizing: bool) -> None:
    """Triton's kernels as the CPU's providers; the quantizing ops only if `quantizing`."""
    reset_registries()
    regs = get_registries()
    for op in DENSE_OPS:
        regs.kernels.add(KernelProvider(op, "triton", f"{__name__}:KERNELS.{op}", ("cpu",),
                                        priority=100), "test")
    for op, kind in W8A8_OPS.items():
        regs.kernels.add(KernelProvider(
            op, "triton", f"{__name__}:KERNELS.{op}", ("cpu",), priority=100,
            prepare=f"{QUANT}:prepare_{kind}", supports=f"{QUANT}:supports_{kind}",
            quantized_input=f"{QUANT}:quantized_input"), "test")
    if quantizing:
        for op in QUANT_INPUT_OPS:
            regs.kernels.add(KernelProvider(op, "triton", f"{__name__}:COUNTED.{op}",
                                            ("cpu",), priority=100), "test")


@pytest.fixture
def on_cpu(device: str):
    if device != "cpu":
        pytest.skip("on a GPU, tests/platforms/cuda runs the CUDA platform's providers")
    yield
    reset_registries()


def _run(path: Path, dtype: str, quantization: str, quantizing: bool,
         prompts: list[list[int]]) -> list[tuple[list[int], list[float]]]:
    _register(quantizing)
    llm = LLM(str(path), device="cpu", dtype=dtype, num_kv_blocks=32, block_size=8,
              enable_prefix_caching=False, quantization=quantization)
    return greedy_logprobs(llm, prompts, 3)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("quantization", ["fp8", "int8"])
def test_quantized_inputs_change_no_token(on_cpu, tmp_path: Path, quantization: str,
                                          dtype: str) -> None:
    path = make_checkpoint(tmp_path, wide_llama_config(), random_weights=True)
    gen = torch.Generator().manual_seed(7)
    prompts = [torch.randint(3, VOCAB, (n,), generator=gen).tolist() for n in (6, 13, 9)]
    CALLS.clear()
    quantized = _run(path, dtype, quantization, True, prompts)
    # One prefill step of 28 rows, through 2 layers: every add + norm but the first layer's
    # input norm (no residual yet), and each gated activation; the decode steps' 3 rows
    # go to kernels that quantize x themselves.
    assert CALLS == {"fused_add_rms_norm_quant": 3, "silu_and_mul_quant": 2}
    assert quantized == _run(path, dtype, quantization, False, prompts)


def test_layers_under_lora_take_their_inputs_unquantized(on_cpu, tmp_path: Path) -> None:
    """LoRA adapters multiply a layer's x themselves: with LoRA on, no layer asks for its
    input quantized, and the tokens are those of the same run without the quantizing ops."""
    path = make_checkpoint(tmp_path, wide_llama_config(), random_weights=True)
    prompts = [[5, 9, 11, 4, 7, 30], [8, 3, 12, 40, 41, 6, 9]]
    runs = []
    for quantizing in (True, False):
        _register(quantizing)
        CALLS.clear()
        llm = LLM(str(path), device="cpu", dtype="float32", num_kv_blocks=32, block_size=8,
                  enable_prefix_caching=False, quantization="fp8", enable_lora=True)
        runs.append(greedy_logprobs(llm, prompts, 3))
        assert not CALLS
    assert runs[0] == runs[1]
