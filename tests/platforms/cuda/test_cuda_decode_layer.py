"""The CUDA platform's fused decode layers (`CudaPlatform.fuse_decode_layer`, run by
ci/gpu.sh): one sequence's decode steps, captured in graphs, give the same greedy tokens
and logprobs, bit for bit, with each layer's norms and SiLU computed by its one-row
matmuls (and its rotary embedding by the qkv kernel) as with every op its own kernel (PAGODA_CUDA_FUSE_DECODE=0), in float32 and
bfloat16, with dense, FP8 and INT4 weights."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

pytest.importorskip("pagoda_cuda", reason="pagoda-cuda is not installed")

from pagoda import LLM, SamplingParams  # noqa: E402
from pagoda.models.decoder import DecoderLayer  # noqa: E402
from tests.engine.tiny_models import VOCAB, make_checkpoint, wide_llama_config  # noqa: E402

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU"),
]

PARAMS = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True, logprobs=0,
                        detokenize=False)


def _fused(llm: LLM) -> list[object]:
    model = llm.engine.core.executor.worker.model
    return [m.fused_decode for m in model.modules() if isinstance(m, DecoderLayer)]


def _run(llm: LLM, prompts: list[list[int]]) -> list[tuple[list[int], list[float]]]:
    outs = llm.generate([{"prompt_token_ids": p} for p in prompts], PARAMS, use_tqdm=False)
    return [(list(o.outputs[0].token_ids), [s.logprobs[0] for s in o.outputs[0].logprobs])
            for o in outs]


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
    fused = LLM(path, **common)
    assert fused.engine.core.info["graph_batch_sizes"] == [1]
    assert all(isinstance(f, TritonDecodeLayer) and f.rotates for f in _fused(fused))
    monkeypatch.setenv("PAGODA_CUDA_FUSE_DECODE", "0")
    op_by_op = LLM(path, **common)
    assert _fused(op_by_op) == [None, None]
    assert _run(fused, prompts) == _run(op_by_op, prompts)
