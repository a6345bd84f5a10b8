"""The CPU's fused decode step of a decoder layer (`Platform.fuse_decode_layer`).

Where a layer's ops are all the native kernels' (float32, every linear packed for
`pagoda_cpu.csrc_ops`, SiLU), its decode step runs as `pagoda_cpu._C.DecodeLayer`: the
norm, qkv projection and rotary embedding in one call, the output projection, norm and MLP
in another, the same kernels in the same order as op by op. SmolLM2's 30 layers spent
about 2 ms of a 9.2 ms decode step in the Python between those kernels (module calls,
views, the linear's dispatch; 2 Zen 5 cores); fused, the step takes 7.2 ms
(docs/benchmarks.md, "Session 13").
"""

from __future__ import annotations

from typing import Any

import torch

from pagoda.models.decode_fusion import DecodeLayerSpec, FusableLinear
from pagoda_cpu import csrc_ops
from pagoda_cpu.csrc import native

NO_ROW_LIMIT = 2**31 - 1
"""max_rows where no linear of the layer is ever dequantized per call (its GEMM kernel
takes every row count)."""


def _packed(linear: FusableLinear) -> csrc_ops.PackedWoqWeight | None:
    weight = linear.weight
    if linear.op is not csrc_ops.woq_linear or type(weight) is not csrc_ops.PackedWoqWeight:
        return None
    return weight


def fuse_decode_layer(spec: DecodeLayerSpec) -> Any | None:
    """`pagoda_cpu._C.DecodeLayer` for the layer, or None where one of its ops is not the
    native kernels' (the layer then runs op by op)."""
    kernels = native()
    if kernels is None or spec.input_norm.dtype != torch.float32:
        return None
    if (spec.rms_norm is not kernels.rms_norm
            or spec.fused_add_rms_norm is not kernels.fused_add_rms_norm
            or spec.rotary_embedding is not kernels.rotary_embedding
            or spec.act_and_mul is not kernels.silu_and_mul):
        return None
    linears = (spec.qkv, spec.o, spec.gate_up, spec.down)
    weights = [_packed(linear) for linear in linears]
    if None in weights:
        return None
    packed = [kernels.PackedLinear(w.codes, w.scales, w.offsets, w.bits, linear.bias,
                                   w.gemv_max_rows, w.act_block)
              for w, linear in zip(weights, linears, strict=True)]
    max_rows = min(w.gemm_max_rows or NO_ROW_LIMIT for w in weights)
    return kernels.DecodeLayer(*packed, spec.input_norm, spec.post_attention_norm, spec.eps,
                               spec.cos_sin_cache, spec.is_neox, spec.num_heads,
                               spec.num_kv_heads, spec.head_size, max_rows)
