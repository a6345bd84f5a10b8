"""Each kind of linear layer with LoRA slots: its output is the base layer's (whatever
its quant method computes) plus each token's own adapter, x A^T B^T x scaling, per part
of a merged layer (qkv, gate/up; a fused checkpoint's too); a token of no adapter gets
the base output unchanged. Checked against the definition in float64."""

from __future__ import annotations

import pytest
import torch

from pagoda.lora.layers import LoRASlots, TokenSlots
from pagoda.models.layers.linear import (
    ColumnParallelLinear,
    Linear,
    MergedColumnParallelLinear,
    QKVParallelLinear,
    RowParallelLinear,
)
from pagoda.models.weights import process_weights_after_loading
from pagoda.ops import OpTable, use_ops
from pagoda.ops.lora_reference import group_by_slot
from pagoda.platforms import resolve_platform
from pagoda.quant.selector import select_quant_method

K = 48
SLOTS = torch.tensor([0, 1, -1, 0, 1], dtype=torch.int32)


def _layers(quant: object) -> dict[str, Linear]:
    common = {"dtype": torch.float32, "quant_method": quant}
    return {
        "linear": Linear(K, 40, prefix="m.lin", **common),
        "column": ColumnParallelLinear(K, 40, bias=True, prefix="m.col", **common),
        "row": RowParallelLinear(K, 40, bias=True, prefix="m.row", **common),
        "gate_up": MergedColumnParallelLinear(K, {"gate_proj": 32, "up_proj": 32},
                                              prefix="m.gate_up_proj", **common),
        "qkv": QKVParallelLinear(K, 8, 4, 2, prefix="m.qkv_proj", **common),
        "qkv_fused": QKVParallelLinear(K, 8, 4, 2, prefix="m.qkv_proj",
                                       fused_checkpoint=True, **common),
    }


def _part_sizes(layer: Linear) -> dict[str, int]:
    if isinstance(layer, MergedColumnParallelLinear) and not layer.fused_checkpoint:
        parent = layer.prefix.rpartition(".")[0]
        return {f"{parent}.{s}": n for s, n in layer.whole_shards.items()}
    return {layer.checkpoint_names[0]: layer.output_size}


@pytest.mark.parametrize("quantization", ["none", "int8"])
@pytest.mark.parametrize("kind", list(_layers(None)))
def test_output_is_base_plus_each_tokens_adapter(kind: str, quantization: str) -> None:
    gen = torch.Generator().manual_seed(3)
    platform = resolve_platform("cpu")
    with use_ops(OpTable("cpu", dtype=torch.float32)):
        layer = _layers(select_quant_method(platform, quantization))[kind]
        parts = _part_sizes(layer)
        for name, size in parts.items():
            shard = name.rpartition(".")[2] if len(parts) > 1 else None
            layer.load_checkpoint_tensor("weight", torch.randn(size, K, generator=gen), shard,
                                         f"{name}.weight")
        if layer.bias is not None:
            layer.bias.data.copy_(torch.randn(layer.bias.shape, generator=gen))
        process_weights_after_loading(layer)
        assert (type(layer.quant_method).__name__ == "UnquantizedMethod") == (
            quantization == "none")
        x = torch.randn(len(SLOTS), K, generator=gen)
        base = layer(x)
        order, tiles = group_by_slot(SLOTS.numpy(), 2)
        tokens = TokenSlots(SLOTS.clone(), torch.from_numpy(order), torch.from_numpy(tiles))
        layer.lora = LoRASlots(layer, num_slots=2, max_rank=8, tokens=tokens,
                               dtype=torch.float32, device=torch.device("cpu"))
    adapters = []
    for slot, (rank, scaling) in enumerate(((4, 0.5), (8, 2.0))):
        weights = {name: (torch.randn(rank, K, generator=gen),
                          torch.randn(size, rank, generator=gen))
                   for i, (name, size) in enumerate(parts.items()) if slot or i == 0}
        layer.lora.set_slot(slot, weights, scaling)  # slot 0 adapts the first part only
        adapters.append((weights, scaling))
    got = layer(x)
    want = base.double().clone()
    for t, slot in enumerate(SLOTS.tolist()):
        if slot < 0:
            continue
        weights, scaling = adapters[slot]
        delta = []
        for name, size in parts.items():
            if name in weights:
                a, b = (w.double() for w in weights[name])
                delta.append(x[t].double() @ a.T @ b.T * scaling)
            else:
                delta.append(torch.zeros(size, dtype=torch.float64))
        want[t] += torch.cat(delta)
    torch.testing.assert_close(got.double(), want, atol=1e-4, rtol=1e-4)
    assert torch.equal(got[2], base[2])  # slot -1: the base output
