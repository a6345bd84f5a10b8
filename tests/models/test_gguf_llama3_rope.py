"""A Llama GGUF with llama.cpp's `rope_freqs.weight` gives the logits of HF's Llama with the
llama3 RoPE scaling the factors were made from (and not those without it)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

pytest.importorskip("gguf")

from gguf import GGMLQuantizationType as T  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

from pagoda.attention.reference import ReferenceAttentionBackend  # noqa: E402
from pagoda.gguf import GGUFModel  # noqa: E402
from pagoda.gguf.rope import llama3_factors  # noqa: E402
from pagoda.models import resolve_model_class  # noqa: E402
from pagoda.ops import OpTable, use_ops  # noqa: E402
from tests.models.model_harness import PagedBatch, hf_logits  # noqa: E402
from tests.quant.tiny_gguf import HEAD_DIM, VOCAB, write_tiny_llama  # noqa: E402

THETA = 10000.0  # the tiny file's rope.freq_base
# Three of the eight frequencies of a 16-wide head fall in the blend.
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
          "high_freq_factor": 16.0, "original_max_position_embeddings": 2048}


def _hf_model(config: LlamaConfig, rope: dict, weights: dict[str, torch.Tensor]
              ) -> LlamaForCausalLM:
    model = LlamaForCausalLM(LlamaConfig(**{**config.to_dict(), "rope_parameters": rope}))
    model.load_state_dict({**weights, "lm_head.weight": weights["model.embed_tokens.weight"]})
    return model.eval()


def test_logits_match_hf_llama3(tmp_path: Path) -> None:
    factors = llama3_factors(LLAMA3, THETA, HEAD_DIM).astype("float32")
    path = write_tiny_llama(tmp_path / "llama31.gguf", lambda name: T.F32,
                            extra={"rope_freqs.weight": factors})
    gguf = GGUFModel(path)
    config = gguf.config
    assert config.rope_parameters["rope_type"] == "llama3"
    weights = dict(gguf.iter_weights())

    with use_ops(OpTable.reference()):
        model = resolve_model_class(config)(config, dtype=torch.float32,
                                            attn_backend=ReferenceAttentionBackend)
    model.load_weights(gguf.iter_weights())
    tokens = torch.randint(VOCAB, (40,), generator=torch.Generator().manual_seed(0)).tolist()
    (ours,) = PagedBatch(model.eval(), block_size=8).step([(0, tokens)])

    expected = hf_logits(_hf_model(config, {**LLAMA3, "rope_theta": THETA}, weights), tokens)
    torch.testing.assert_close(ours, expected, atol=1e-4, rtol=1e-4)
    plain = hf_logits(_hf_model(config, {"rope_type": "default", "rope_theta": THETA}, weights),
                      tokens)
    assert not torch.allclose(plain, expected, atol=1e-3)  # the scaling matters here
