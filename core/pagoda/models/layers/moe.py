"""Mixture-of-experts feed-forward blocks: a router choosing top-k experts per token, the
experts' weights stacked per layer and applied by the `fused_moe` op, and an optional
shared expert every token goes through.

Under tensor parallelism every rank holds every expert's block of intermediate features
(as the MLP splits them) and the ranks' partial outputs are all-reduced. With expert
parallelism (`TensorParallelGroup.expert_parallel`) a rank holds num_experts / ranks
whole experts instead and runs, of every token's choices, those of its own experts; the
all-reduce then adds the experts of every rank. The router is replicated: every rank
makes the same choices.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from pagoda.distributed import shard_range, tp_group
from pagoda.models.layers.linear import Linear
from pagoda.models.layers.mlp import GatedMLP
from pagoda.ops import current_ops
from pagoda.quant import QuantMethod
from pagoda.quant.checkpoint import CheckpointTensor, copy_weight, dense


@dataclass(frozen=True)
class ExpertNames:
    """The checkpoint names of an expert's projections, under `<experts>.<index>.`."""

    gate: str = "gate_proj"
    up: str = "up_proj"
    down: str = "down_proj"


MIXTRAL_EXPERT_NAMES = ExpertNames("w1", "w3", "w2")


def route(router_logits: torch.Tensor, top_k: int,
          renormalize: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(weights [T, top_k] float32, expert ids [T, top_k] int64): the top_k experts of the
    softmax over all of them (float32), their probabilities rescaled to sum to one if
    `renormalize` (which equals a softmax over the chosen experts' logits)."""
    probs = torch.softmax(router_logits, dim=-1, dtype=torch.float32)
    weights, ids = torch.topk(probs, top_k, dim=-1)
    if renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights, ids


class FusedMoE(nn.Module):
    """The routed experts of one layer: w13 [E, 2 I, H] (each expert's gate rows, then its
    up rows) and w2 [E, H, I], this rank's part (see the module docstring), loaded from the
    checkpoint's per-expert tensors `<prefix>.<e>.<gate|up|down>.weight`."""

    def __init__(self, num_experts: int, hidden_size: int, intermediate_size: int, *,
                 dtype: torch.dtype, names: ExpertNames = ExpertNames()):
        super().__init__()
        self.tp = tp = tp_group()
        self.num_experts, self.hidden_size = num_experts, hidden_size
        self.intermediate_size = intermediate_size
        self.names = names
        if tp.expert_parallel:
            if num_experts % tp.world_size:
                raise ValueError(f"{num_experts} experts do not split evenly over "
                                 f"tensor_parallel_size {tp.world_size} (enable_expert_parallel)")
            self.first_expert, self.local_experts = shard_range(num_experts, tp.rank,
                                                                tp.world_size)
            self.first_feature, self.local_features = 0, intermediate_size
        else:
            self.first_expert, self.local_experts = 0, num_experts
            try:
                self.first_feature, self.local_features = shard_range(
                    intermediate_size, tp.rank, tp.world_size)
            except ValueError as exc:
                raise ValueError(f"experts' intermediate size: {exc}") from None
        local = (self.local_experts, self.local_features)
        self.w13 = nn.Parameter(torch.empty(local[0], 2 * local[1], hidden_size, dtype=dtype),
                                requires_grad=False)
        self.w2 = nn.Parameter(torch.empty(local[0], hidden_size, local[1], dtype=dtype),
                               requires_grad=False)
        ops = current_ops()
        self._fused_moe, self._all_reduce = ops.fused_moe, ops.all_reduce

    def checkpoint_shards(self, attr: str) -> dict[str, str]:
        """Checkpoint name (under this module) -> shard "<expert>.<projection>" of every
        expert's tensors that parameter `attr` stacks; other ranks' experts included."""
        projections = ((self.names.gate, self.names.up) if attr == "w13"
                       else (self.names.down,))
        return {f"{e}.{p}.weight": f"{e}.{p}" for e in range(self.num_experts)
                for p in projections}

    def load_checkpoint_tensor(self, attr: str, tensor: CheckpointTensor, shard: str,
                               name: str) -> None:
        """Copy checkpoint tensor `name` (one expert's whole projection) into its place in
        `attr`: this rank's features of it, or nothing if another rank holds the expert."""
        index, _, projection = shard.partition(".")
        expert = int(index) - self.first_expert
        down = projection == self.names.down
        whole = ((self.hidden_size, self.intermediate_size) if down
                 else (self.intermediate_size, self.hidden_size))
        tensor = dense(tensor)
        if tuple(tensor.shape) != whole:
            raise ValueError(f"Weight {name!r} has shape {tuple(tensor.shape)}, the model "
                             f"expects {whole}")
        if not 0 <= expert < self.local_experts:
            return
        part = tensor.narrow(1 if down else 0, self.first_feature, self.local_features)
        if down:
            dest = self.w2[expert]
        else:
            rows = self.local_features
            dest = self.w13[expert, :rows] if projection == self.names.gate else self.w13[
                expert, rows:]
        copy_weight(dest, part, name)

    def forward(self, hidden: torch.Tensor, topk_weights: torch.Tensor,
                topk_ids: torch.Tensor) -> torch.Tensor:
        """hidden [T, H], the router's choices (global expert ids) -> [T, H]."""
        if self.local_experts != self.num_experts:
            local = topk_ids - self.first_expert
            topk_ids = torch.where((local >= 0) & (local < self.local_experts), local, -1)
        out = self._fused_moe(hidden, self.w13, self.w2, topk_weights, topk_ids)
        if self.tp.world_size > 1:
            out = self._all_reduce(out, self.tp.group)
        return out


def has_experts(model: nn.Module) -> bool:
    """Whether `model` (this rank's part of it) has mixture-of-experts layers."""
    return any(isinstance(module, FusedMoE) for module in model.modules())


class SparseMoeBlock(nn.Module):
    """A layer's feed-forward block: router (`gate`, replicated) -> top-k experts, plus a
    shared expert (a gated SiLU MLP scaled by sigmoid(`shared_expert_gate`), Qwen2-MoE)
    when `shared_intermediate_size` is set. Unquantized weights only."""

    def __init__(self, hidden_size: int, num_experts: int, top_k: int,
                 intermediate_size: int, *, renormalize: bool,
                 shared_intermediate_size: int = 0, dtype: torch.dtype,
                 quant_method: QuantMethod | None = None, prefix: str,
                 names: ExpertNames = ExpertNames()):
        super().__init__()
        if quant_method is not None and quant_method.name != "none":
            raise ValueError(f"{prefix}: mixture-of-experts layers take unquantized weights "
                             f"only, not quantization {quant_method.describe()!r}")
        self.top_k, self.renormalize = top_k, renormalize
        self.gate = Linear(hidden_size, num_experts, dtype=dtype, prefix=f"{prefix}.gate")
        self.experts = FusedMoE(num_experts, hidden_size, intermediate_size, dtype=dtype,
                                names=names)
        self.shared_expert = self.shared_expert_gate = None
        if shared_intermediate_size:
            self.shared_expert = GatedMLP(hidden_size, shared_intermediate_size, dtype=dtype,
                                          prefix=f"{prefix}.shared_expert")
            self.shared_expert_gate = Linear(hidden_size, 1, dtype=dtype,
                                             prefix=f"{prefix}.shared_expert_gate")

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        weights, ids = route(self.gate(hidden), self.top_k, self.renormalize)
        out = self.experts(hidden, weights, ids)
        if self.shared_expert is not None and self.shared_expert_gate is not None:
            out = out + torch.sigmoid(self.shared_expert_gate(hidden)) * self.shared_expert(hidden)
        return out
