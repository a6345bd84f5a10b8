"""A merged layer whose checkpoint stores its parts fused (Phi-3's qkv_proj, gate_up_proj)
holds exactly what it holds when the parts come separately: dense weights and quantized
tensors of any layout (codes packed along the output, per-part scalars), whole or cut for
a tensor-parallel rank."""

from __future__ import annotations

import pytest
import torch

from pagoda.distributed import TensorParallelGroup
from pagoda.models.layers import MergedColumnParallelLinear, QKVParallelLinear
from pagoda.ops import OpTable, use_ops
from pagoda.quant import UnquantizedMethod
from pagoda.quant.formats import GptqMethod
from pagoda.quant.layout import layout_of

METHODS = {
    "dense": UnquantizedMethod,
    "gptq-act-order": lambda: GptqMethod.from_config(
        {"bits": 4, "group_size": 16, "desc_act": True, "sym": True}),
}


def _layer(kind: str, method: str, fused: bool) -> MergedColumnParallelLinear:
    common = dict(dtype=torch.float32, quant_method=METHODS[method](), fused_checkpoint=fused)
    if kind == "qkv":
        return QKVParallelLinear(64, 16, 4, 2, prefix="model.layers.0.self_attn.qkv_proj",
                                 **common)
    return MergedColumnParallelLinear(64, {"gate_proj": 96, "up_proj": 96},
                                      prefix="model.layers.0.mlp.gate_up_proj", **common)


def _part_tensors(layer: MergedColumnParallelLinear, gen: torch.Generator
                  ) -> dict[str, dict[str, torch.Tensor]]:
    """Random whole-model checkpoint tensors per parameter and part (a per-part scalar or
    index is the same for every part, as a fused checkpoint can only store one)."""
    tensors: dict[str, dict[str, torch.Tensor]] = {}
    for attr, param in layer.named_parameters():
        layout = layout_of(param)
        parts = {}
        for shard, size in layer.whole_shards.items():
            shape = list(param.shape[1:] if layout.per_shard else param.shape)
            if layout.output_dim is not None and not layout.per_shard:
                shape[layout.output_dim] = size // layout.output_per
            if layout.per_shard and parts:
                parts[shard] = next(iter(parts.values()))
            elif param.is_floating_point():
                parts[shard] = torch.randn(shape, generator=gen)
            else:
                parts[shard] = torch.randint(0, 2**20, shape, generator=gen, dtype=param.dtype)
        tensors[attr] = parts
    return tensors


@pytest.mark.parametrize("rank", [None, 0, 1], ids=["whole", "rank0-of-2", "rank1-of-2"])
@pytest.mark.parametrize("method", list(METHODS))
@pytest.mark.parametrize("kind", ["qkv", "gate_up"])
def test_fused_parts_load_as_separate_ones(kind: str, method: str, rank: int | None,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    if rank is not None:  # this rank's cut of a two-way split, without processes
        group = TensorParallelGroup(rank=rank, world_size=2, group=None)
        monkeypatch.setattr("pagoda.distributed.parallel_state._tp_group", group)
    with use_ops(OpTable("cpu")):
        separate, fused = _layer(kind, method, False), _layer(kind, method, True)
    assert fused.checkpoint_names == (fused.prefix,)
    tensors = _part_tensors(separate, torch.Generator().manual_seed(0))
    for attr, parts in tensors.items():
        for shard, tensor in parts.items():
            separate.load_checkpoint_tensor(attr, tensor, shard, f"{shard}.{attr}")
        layout = layout_of(getattr(fused, attr))
        whole = (next(iter(parts.values())) if layout.per_shard
                 else torch.cat(list(parts.values()), dim=layout.output_dim))
        fused.load_checkpoint_tensor(attr, whole, None, f"{fused.prefix}.{attr}")
    for (attr, want), (_, got) in zip(separate.named_parameters(), fused.named_parameters(),
                                      strict=True):
        assert torch.equal(got, want), attr


def test_a_fused_tensor_of_the_wrong_size_is_named() -> None:
    with use_ops(OpTable("cpu")):
        layer = _layer("qkv", "dense", True)
    with pytest.raises(ValueError, match=r"Weight 'w' has shape \(100, 64\), the model expects "
                                         r"128 along dimension 0 \(the stacked q_proj, k_proj"):
        layer.load_checkpoint_tensor("weight", torch.zeros(100, 64), None, "w")
