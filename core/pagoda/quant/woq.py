"""Weight-only integer layers (W4A16, W8A16): codes with a scale and zero point per group of
inputs, in the layouts the field's checkpoints use, applied by `woq_linear`.

Facts about each layout (all little-endian; element i of a 32-bit word sits at bits
i*bits .. i*bits + bits - 1):

- compressed-tensors `pack-quantized`: `weight_packed` int32 [N, K * bits / 32] packed along
  the input; codes are the signed values plus 2**(bits-1); `weight_scale` [N, K / group];
  asymmetric schemes add `weight_zero_point` (signed zero points packed the same way along
  the output: [N * bits / 32, K / group]); `weight_shape` is the unpacked [N, K];
  act-order checkpoints add `weight_g_idx` [K]. w = (code - zero code) * scale.
- GPTQ: `qweight` int32 [K * bits / 32, N] packed along the input, `qzeros` int32
  [K / group, N * bits / 32] packed along the output, holding zero - 1 (AutoGPTQ's
  convention; `checkpoint_format` gptq_v2 stores the zero itself), `scales` [K / group, N],
  `g_idx` [K] (the group of each input; with `desc_act` not in order).
- AWQ (GEMM version): `qweight` int32 [K, N / 8] packed along the output with the eight
  columns of a word in the order 0, 2, 4, 6, 1, 3, 5, 7; `qzeros` [K / group, N / 8] the
  same way; `scales` [K / group, N]. 4 bits only.

Act-order (g_idx not in order): the inputs are permuted so that each group is contiguous
(the same permutation for every part of a fused layer, as GPTQ derives it from the shared
input), and the layer permutes its input the same way before the matmul.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import nn

from pagoda.quant.layout import ParamLayout, add_param
from pagoda.quant.op_method import OpLinearMethod, num_shards
from pagoda.quant.tensors import GroupQuantWeight

Layout = Literal["compressed-tensors", "gptq", "awq"]
AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)
"""AWQ: word position i holds column AWQ_ORDER[i] of its eight."""


def unpack_int32(packed: torch.Tensor, bits: int, dim: int) -> torch.Tensor:
    """uint8 codes of int32 words packed along `dim` (32 / bits codes per word, the first
    in the lowest bits)."""
    if bits not in (4, 8):
        raise ValueError(f"{bits}-bit codes are not supported (4 or 8)")
    words = packed.to(torch.int32).movedim(dim, -1).contiguous()
    octets = words.view(torch.uint8)
    codes = octets if bits == 8 else torch.stack((octets & 0xF, octets >> 4), -1).flatten(-2)
    return codes.movedim(-1, dim)


def _awq_natural(codes: torch.Tensor) -> torch.Tensor:
    """Columns of AWQ-ordered codes [..., N] back in their natural order."""
    inverse = torch.tensor(sorted(range(8), key=AWQ_ORDER.__getitem__), device=codes.device)
    n = codes.shape[-1]
    return codes.view(*codes.shape[:-1], n // 8, 8)[..., inverse].view(codes.shape)


@dataclass(frozen=True)
class WoqScheme:
    """How a checkpoint stores a weight-only quantized layer."""

    layout: Layout
    bits: int = 4
    group_size: int | None = 128
    """Inputs per group; None: one group per row (per-channel scales)."""
    symmetric: bool = True
    """compressed-tensors: no zero points stored (zero = 2**(bits-1))."""
    act_order: bool = False
    """The checkpoint stores each input's group (g_idx) and it may be out of order."""
    zero_plus_one: bool = True
    """GPTQ: qzeros hold zero - 1 (AutoGPTQ); False for gptq_v2."""

    def describe(self) -> str:
        zeros = "symmetric" if self.symmetric else "with zero points"
        order = ", act-order" if self.act_order else ""
        groups = f"groups of {self.group_size}" if self.group_size else "per channel"
        return f"{self.layout} W{self.bits}A16 ({groups}, {zeros}{order})"


class WoqLinearMethod(OpLinearMethod):
    name = "woq"
    op = "woq_linear"

    def __init__(self, scheme: WoqScheme):
        if scheme.bits not in (4, 8) or (scheme.layout == "awq" and scheme.bits != 4):
            raise ValueError(f"{scheme.describe()}: {scheme.bits}-bit weights are not "
                             f"supported (4 or 8; AWQ 4)")
        self.scheme = scheme

    def describe(self) -> str:
        return self.scheme.describe()

    def create_params(
        self, layer: nn.Module, input_size: int, output_size: int, dtype: torch.dtype
    ) -> None:
        s, n, k = self.scheme, output_size, input_size
        pack, g = 32 // s.bits, s.group_size or k
        if k % g:
            raise ValueError(f"layer {layer.prefix}: {k} inputs (this rank's) are not whole "
                             f"groups of {g} ({self.describe()})")
        groups = k // g
        # Per-channel scales are whole on every rank; group scales split with the inputs.
        grouped = {"input_per": g} if s.group_size else {"input_dim": None}
        grouped_t = {"input_dim": 0, "input_per": g} if s.group_size else {"input_dim": None}
        idx_layout = ParamLayout(output_dim=None, input_dim=0, per_shard=True,
                                 required=s.layout == "compressed-tensors" and s.act_order)
        if s.layout == "compressed-tensors":
            add_param(layer, "weight_packed", torch.empty(n, k // pack, dtype=torch.int32),
                      ParamLayout(input_per=pack))
            add_param(layer, "weight_scale", torch.empty(n, groups), ParamLayout(**grouped))
            add_param(layer, "weight_shape", torch.empty(num_shards(layer), 2, dtype=torch.int64),
                      ParamLayout(output_dim=None, input_dim=None, per_shard=True))
            if not s.symmetric:
                add_param(layer, "weight_zero_point",
                          torch.empty(-(-n // pack), groups, dtype=torch.int32),
                          ParamLayout(output_per=pack, **grouped))
            if s.act_order:
                add_param(layer, "weight_g_idx",
                          torch.empty(num_shards(layer), k, dtype=torch.int32), idx_layout)
            return
        if s.layout == "gptq":
            add_param(layer, "qweight", torch.empty(k // pack, n, dtype=torch.int32),
                      ParamLayout(output_dim=1, input_dim=0, input_per=pack))
        else:
            add_param(layer, "qweight", torch.empty(k, n // pack, dtype=torch.int32),
                      ParamLayout(output_dim=1, input_dim=0, output_per=pack))
        add_param(layer, "qzeros", torch.empty(groups, n // pack, dtype=torch.int32),
                  ParamLayout(output_dim=1, output_per=pack, **grouped_t))
        add_param(layer, "scales", torch.empty(groups, n), ParamLayout(output_dim=1, **grouped_t))
        if s.layout == "gptq":
            # -1: absent from the checkpoint (inputs in order).
            add_param(layer, "g_idx",
                      torch.full((num_shards(layer), k), -1, dtype=torch.int32), idx_layout)

    def canonical(self, layer: nn.Module) -> GroupQuantWeight:
        s = self.scheme
        if s.layout == "compressed-tensors":
            codes = unpack_int32(layer.weight_packed, s.bits, 1)
            scales = layer.weight_scale.float()
            if s.symmetric:
                zeros = torch.full_like(scales, 2 ** (s.bits - 1))
            else:
                zeros = unpack_int32(layer.weight_zero_point, s.bits, 0)[: codes.shape[0]].float()
            self._check_shapes(layer, codes)
            g_idx = layer.weight_g_idx if s.act_order else None
        else:
            dim = 0 if s.layout == "gptq" else 1
            codes = unpack_int32(layer.qweight, s.bits, dim)
            zeros = unpack_int32(layer.qzeros, s.bits, 1).float()
            if s.layout == "awq":
                codes, zeros = _awq_natural(codes), _awq_natural(zeros)
            elif s.zero_plus_one:
                zeros = zeros + 1
            codes, zeros, scales = codes.T, zeros.T, layer.scales.float().T
            g_idx = layer.g_idx if s.layout == "gptq" else None
        weight = GroupQuantWeight(codes.contiguous(), scales.contiguous(),
                                  (-zeros * scales).contiguous(), s.bits)
        return self._in_group_order(layer, weight, g_idx)

    def _check_shapes(self, layer: nn.Module, codes: torch.Tensor) -> None:
        """compressed-tensors' weight_shape must be the whole tensor this part came from."""
        for shape in layer.weight_shape.tolist():
            if shape[1] != codes.shape[1] * layer.tp.world_size and shape[1] != codes.shape[1]:
                raise ValueError(f"layer {layer.prefix}: weight_shape {shape} does not match "
                                 f"its {codes.shape[1]} packed inputs")

    def _in_group_order(self, layer: nn.Module, weight: GroupQuantWeight,
                        g_idx: torch.Tensor | None) -> GroupQuantWeight:
        layer.input_perm = None
        if g_idx is None or bool((g_idx < 0).all()):
            return weight
        first = g_idx[0]
        if not bool((g_idx == first).all()):
            raise ValueError(f"layer {layer.prefix}: its fused parts have different input "
                             f"orders (g_idx); {self.describe()} needs one")
        k = first.numel()
        g = self.scheme.group_size or k
        in_order = torch.arange(k, device=first.device) // g
        if bool((first == in_order).all()):
            return weight
        if layer.splits_input and layer.tp.world_size > 1:
            raise ValueError(f"layer {layer.prefix}: act-order ({self.describe()}) with the "
                             f"inputs split over tensor-parallel ranks is not supported")
        perm = torch.argsort(first.long(), stable=True)
        if not bool((first[perm].long() == in_order).all()):
            raise ValueError(f"layer {layer.prefix}: g_idx does not put {g} inputs in each "
                             f"group ({self.describe()})")
        layer.input_perm = perm
        # Column j of the permuted weight is input perm[j]; its group is j // g, and the
        # scales are indexed by group already.
        return GroupQuantWeight(weight.codes[:, perm].contiguous(), weight.scales,
                                weight.offsets, weight.bits)

    def apply(
        self, layer: nn.Module, x: torch.Tensor, bias: torch.Tensor | None = None
    ) -> torch.Tensor:
        if layer.input_perm is not None:
            x = x.index_select(-1, layer.input_perm)
        return layer.quant_op(x, layer.qweight, bias)

    def kernel_call(self, layer: nn.Module) -> tuple[Callable[..., torch.Tensor], Any] | None:
        return None if layer.input_perm is not None else (layer.quant_op, layer.qweight)
