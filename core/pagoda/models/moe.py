"""Mixture-of-experts decoders: Mixtral, Qwen2-MoE and Qwen3-MoE.

Each is the Llama-family decoder (`pagoda.models.llama`: attention, q/k norm, qkv bias and
sliding windows as config says) whose feed-forward block is sparse in some or all layers:
a softmax router picks top-k experts per token (Mixtral rescales their weights to sum to
one; Qwen's `norm_topk_prob` decides), Qwen2-MoE adds a shared expert under a sigmoid gate,
and Qwen's `decoder_sparse_step` and `mlp_only_layers` keep some layers dense. Routing
schemes of other families (another scoring function, grouped or biased top-k, scaled
weights) fail at load, naming the config field.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from pagoda.models.decoder import FeedForward, gated_mlp
from pagoda.models.decoder_spec import DecoderSpec
from pagoda.models.layers.moe import MIXTRAL_EXPERT_NAMES, ExpertNames, SparseMoeBlock
from pagoda.models.llama import LlamaForCausalLM
from pagoda.quant import QuantMethod

if TYPE_CHECKING:
    from transformers import PretrainedConfig

_UNSUPPORTED: dict[str, tuple[tuple[Any, ...], str]] = {
    "scoring_func": ((None, "softmax"), "routing scores other than a softmax"),
    "topk_method": ((None, "greedy"), "top-k methods other than a plain top-k"),
    "n_group": ((None, 1), "grouped top-k"),
    "topk_group": ((None, 1), "grouped top-k"),
    "routed_scaling_factor": ((None, 1.0), "scaled routing weights"),
    "n_shared_experts": ((None, 0), "DeepSeek-style shared experts"),
    "first_k_dense_replace": ((None, 0), "DeepSeek-style dense first layers"),
}
"""Config fields of other MoE families: the values that mean what our router does, and
what any other value asks for. (Mixtral's `router_jitter_noise` and the auxiliary-loss
fields act in training only.)"""


@dataclass(frozen=True)
class MoeSpec:
    """The config facts of a model's sparse layers."""

    num_experts: int
    top_k: int
    intermediate_size: int
    """Each expert's intermediate features."""
    renormalize: bool
    """Whether the chosen experts' weights are rescaled to sum to one."""
    shared_intermediate_size: int
    """The shared expert's intermediate features (0: none)."""
    sparse_layers: frozenset[int]

    @classmethod
    def from_config(cls, config: PretrainedConfig) -> MoeSpec:
        for name, (meaning_ours, what) in _UNSUPPORTED.items():
            value = getattr(config, name, None)
            if value not in meaning_ours:
                raise ValueError(f"Unsupported MoE config {name}={value!r}: {what} is not "
                                 f"implemented (softmax over all experts, then top-k)")
        mixtral = config.model_type == "mixtral"
        num_experts = getattr(config, "num_local_experts", None) or config.num_experts
        top_k = config.num_experts_per_tok
        if not 0 < top_k <= num_experts:
            raise ValueError(f"num_experts_per_tok={top_k} must be in 1..{num_experts} "
                             f"(the number of experts)")
        layers = range(config.num_hidden_layers)
        if mixtral:
            sparse = frozenset(layers)
        else:
            step, dense = config.decoder_sparse_step, set(config.mlp_only_layers or ())
            sparse = frozenset(i for i in layers if (i + 1) % step == 0 and i not in dense)
        return cls(
            num_experts=num_experts,
            top_k=top_k,
            intermediate_size=config.intermediate_size if mixtral
            else config.moe_intermediate_size,
            renormalize=mixtral or bool(config.norm_topk_prob),
            shared_intermediate_size=config.shared_expert_intermediate_size
            if config.model_type == "qwen2_moe" else 0,
            sparse_layers=sparse,
        )


def moe_feed_forward(moe: MoeSpec, names: ExpertNames, spec: DecoderSpec, index: int, *,
                     dtype: torch.dtype, quant_method: QuantMethod | None,
                     prefix: str) -> nn.Module:
    """A `FeedForward`: the sparse block in the sparse layers, else the dense MLP."""
    if index not in moe.sparse_layers:
        return gated_mlp(spec, index, dtype=dtype, quant_method=quant_method, prefix=prefix)
    return SparseMoeBlock(spec.hidden_size, moe.num_experts, moe.top_k, moe.intermediate_size,
                          renormalize=moe.renormalize,
                          shared_intermediate_size=moe.shared_intermediate_size, dtype=dtype,
                          quant_method=quant_method, prefix=prefix, names=names)


class MoeForCausalLM(LlamaForCausalLM):
    """Qwen2-MoE and Qwen3-MoE (checkpoint names `mlp.gate`, `mlp.experts.<e>.gate_proj` ...,
    `mlp.shared_expert`, `mlp.shared_expert_gate`)."""

    expert_names = ExpertNames()

    def feed_forward(self, config: PretrainedConfig) -> FeedForward:
        return partial(moe_feed_forward, MoeSpec.from_config(config), self.expert_names)


class MixtralForCausalLM(MoeForCausalLM):
    """Mixtral: every layer sparse, checkpoint names `block_sparse_moe.gate` and
    `block_sparse_moe.experts.<e>.w1|w3|w2` (gate, up, down)."""

    expert_names = MIXTRAL_EXPERT_NAMES

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        return super().load_weights(
            (name.replace(".block_sparse_moe.", ".mlp."), tensor) for name, tensor in weights)
