"""The CUDA platform's fused decode layers (`CudaPlatform.fuse_decode_layer`, run by
ci/gpu.sh): one sequence's decode steps, captured in graphs, give the same greedy tokens
and logprobs, bit for bit, with each layer's norms and SiLU computed by its one-row
matmuls and its rotary embedding by the qkv kernel (PAGODA_CUDA_FUSE_DECODE=1) as with
every op its own kernel (=0), in float32 and bfloat16, with dense, FP8 and INT4 weights."""

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


@pytest.mark.parametrize("quantization", [None, "fp8", "int4"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_fused_layers_match_op_by_op(dtype: str, quantization: str | None, tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from pagoda.kernels.triton.decode_layer import TritonDecodeLayer

    path = str(make_checkpoint(tmp_path, wide_llama_config(), random_weights=True))
    rng = random.Random(6)
    prompts = [[rng.randrange(3, VOCAB) for _ in range(n)] for n in (5, 30)]
    common = dict(device="cuda", dtype=dtype, num_kv_blocks=64, max_num_seqs=1,
                  enable_prefix_caching=False, quantization=quantization)
    monkeypatch.setenv("PAGODA_CUDA_FUSE_DECODE", "1")
    fused = LLM(path, **common)
    assert fused.engine.core.info["graph_batch_sizes"] == [1]
    assert all(isinstance(f, TritonDecodeLayer) and f.rotates for f in _fused(fused))
    monkeypatch.setenv("PAGODA_CUDA_FUSE_DECODE", "0")
    op_by_op = LLM(path, **common)
    assert _fused(op_by_op) == [None, None]
    assert greedy_logprobs(fused, prompts, 12) == greedy_logprobs(op_by_op, prompts, 12)
