"""The CUDA platform's fused decode layers (`CudaPlatform.fuse_decode_layer`, run by
ci/gpu.sh): one sequence's decode steps, captured in graphs, give the same greedy tokens
with each layer's norms and SiLU computed by its one-row matmuls and its rotary embedding
by the qkv kernel (PAGODA_CUDA_FUSE_DECODE=1), or only the SiLU and rotary (=rotary_silu),
as with every op its own kernel (=0), in float32 and bfloat16, with dense, FP8 and INT4
weights (INT4 in 16 bits on the CUDA C++ kernel, which computes the norms but rotates
nothing, as with =native). The logprobs agree to float32's rounding, not bit for bit as in Triton's
interpreter (tests/kernels/test_triton_decode_layer.py): compiled, a kernel's sums and
multiply-adds are ordered and contracted by its own layout and code (on an H100 the
float32 logprobs differed in the 7th digit)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

pytest.importorskip("pagoda_cuda", reason="pagoda-cuda is not installed")

from pagoda import LLM  # noqa: E402
from tests.engine.fused_layers import decoder_layers, greedy_logprobs  # noqa: E402
from tests.engine.tiny_models import VOCAB, make_checkpoint, wide_llama_config  # noqa: E402

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU"),
]


def _fused(llm: LLM) -> list[object]:
    return [layer.fused_decode for layer in decoder_layers(llm)]


@pytest.mark.parametrize(("mode", "quantization"),
                         [(m, q) for m in ("1", "rotary_silu") for q in (None, "fp8", "int4")]
                         + [("native", "int4")])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_fused_layers_match_op_by_op(dtype: str, quantization: str | None, mode: str,
                                     tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pagoda.kernels.triton.decode_layer import TritonDecodeLayer
    from pagoda_cuda import native

    path = str(make_checkpoint(tmp_path, wide_llama_config(), random_weights=True))
    rng = random.Random(6)
    prompts = [[rng.randrange(3, VOCAB) for _ in range(n)] for n in (5, 30)]
    common = dict(device="cuda", dtype=dtype, num_kv_blocks=64, max_num_seqs=1,
                  enable_prefix_caching=False, quantization=quantization)
    monkeypatch.setenv("PAGODA_CUDA_FUSE_DECODE", mode)
    fused = LLM(path, **common)
    assert fused.engine.core.info["graph_batch_sizes"] == [1]
    # the CUDA C++ kernel serves INT4 in 16 bits (its layers' qkv rotate nothing)
    on_kernel = (quantization == "int4" and dtype == "bfloat16"
                 and native.unavailable() is None)
    if mode == "native" and not on_kernel:  # only the kernel's quantized layers fuse
        assert _fused(fused) == [None, None]
    else:
        assert all(isinstance(f, TritonDecodeLayer) and f.rotates != on_kernel
                   and f.fuse_norms == (mode != "rotary_silu") for f in _fused(fused))
    monkeypatch.setenv("PAGODA_CUDA_FUSE_DECODE", "0")
    op_by_op = LLM(path, **common)
    assert _fused(op_by_op) == [None, None]
    # bf16's rounding of a different sum can move a logprob by a unit of bf16 (2^-8 of it)
    tolerance = 1e-5 if dtype == "float32" else 0.02
    for (tokens, logprobs), (want_tokens, want_logprobs) in zip(
            greedy_logprobs(fused, prompts, 12), greedy_logprobs(op_by_op, prompts, 12),
            strict=True):
        assert tokens == want_tokens
        assert logprobs == pytest.approx(want_logprobs, abs=tolerance)


@pytest.mark.parametrize("quantization", [None, "fp8", "int4"])
def test_default_fuses_unquantized_and_kernel_layers(quantization: str | None, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """By default: the layers with unquantized weights and those of the CUDA C++ INT4
    kernel (16-bit, where it is built), not FP8's (their Triton one-row kernels lose to
    computing their inputs)."""
    from pagoda.kernels.triton.decode_layer import TritonDecodeLayer
    from pagoda_cuda import native

    path = str(make_checkpoint(tmp_path, wide_llama_config()))
    monkeypatch.delenv("PAGODA_CUDA_FUSE_DECODE", raising=False)
    llm = LLM(path, device="cuda", dtype="bfloat16", num_kv_blocks=64, max_num_seqs=1,
              quantization=quantization)
    fused = _fused(llm)
    if quantization is None:
        assert all(isinstance(f, TritonDecodeLayer) and f.fuse_norms for f in fused)
    elif quantization == "int4" and native.unavailable() is None:
        assert all(isinstance(f, TritonDecodeLayer) and f.fuse_norms and not f.rotates
                   for f in fused)
    else:
        assert fused == [None, None]
