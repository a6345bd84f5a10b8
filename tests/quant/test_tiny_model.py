"""A tiny GGUF Llama with its Q4/Q8_0 weights kept against the same file dequantized, on
the CPU platform's kernels."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from gguf import GGMLQuantizationType as T

from pagoda.model_source import ModelSource
from pagoda.models.layers.linear import Linear, QKVParallelLinear
from pagoda.ops import OpTable, use_ops
from pagoda.quant.gguf import GGUFMethod
from pagoda.worker.model_loading import build_model
from tests.models.model_harness import PagedBatch
from tests.quant.tiny_gguf import LAYERS

pytest.importorskip("pagoda_cpu")
from pagoda_cpu.attention import CpuSdpaAttentionBackend  # noqa: E402


def _build(path: Path, quant_method: GGUFMethod | None) -> torch.nn.Module:
    source = ModelSource("tiny", path, "gguf")
    with use_ops(OpTable("cpu", dtype=torch.float32)):
        return build_model(source, source.hf_config(), dtype=torch.float32,
                           device=torch.device("cpu"), attn_backend=CpuSdpaAttentionBackend,
                           quant_method=quant_method)


def _logits(model: torch.nn.Module) -> torch.Tensor:
    batch = PagedBatch(model)
    prefill = batch.step([(0, [5, 9, 2, 33, 17, 40]), (1, [7, 1, 63])])
    decode = batch.step([(0, [11]), (1, [20])])
    return torch.cat(prefill + decode)


@pytest.mark.parametrize("v_type", [T.Q4_0, T.Q8_0, T.F16])
def test_kept_model_logits_close_to_dequantized(write_tiny, v_type):
    def type_of(name: str) -> T:
        if name == "token_embd.weight":
            return T.Q8_0
        return v_type if ".attn_v." in name else T.Q4_1

    path = write_tiny(type_of)
    packed_model = _build(path, GGUFMethod())
    linears = [m for m in packed_model.modules() if isinstance(m, Linear)]
    dense = [m for m in linears if m.qweight is None]
    # The fused qkv layer is dense exactly when its v part is neither Q4 like the others
    # (Q8_0 beside Q4 cannot share one weight) nor kept at all (F16).
    assert len(linears) == 4 * LAYERS
    assert all(isinstance(m, QKVParallelLinear) for m in dense)
    assert len(dense) == (0 if v_type == T.Q4_0 else LAYERS)
    ref, ours = _logits(_build(path, None)), _logits(packed_model)
    err = (ours - ref).abs().max() / ref.abs().max()
    assert err < 3e-2, f"relative logit error {float(err):.4f}"
