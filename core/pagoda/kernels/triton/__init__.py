"""Triton kernels for the core ops, with the references' signatures (`pagoda.ops.reference`),
and for the "triton" attention backend (`pagoda.kernels.triton.backend`).

Importing this package imports Triton. The kernels run wherever Triton does: on GPUs, and
on the host CPU under ``TRITON_INTERPRET=1`` (set before Triton is imported) for tests at
small sizes. They accumulate in float32 and never load out of bounds.
"""

from pagoda.kernels.triton.activation import gelu_and_mul, silu_and_mul, silu_and_mul_quant
from pagoda.kernels.triton.attention import num_kv_splits, paged_attention
from pagoda.kernels.triton.bitmask import apply_token_bitmask
from pagoda.kernels.triton.gemv import linear, linear_with
from pagoda.kernels.triton.kv_cache import write_kv_cache
from pagoda.kernels.triton.lora import lora_expand, lora_shrink
from pagoda.kernels.triton.moe import fused_moe
from pagoda.kernels.triton.norm import fused_add_rms_norm, fused_add_rms_norm_quant, rms_norm
from pagoda.kernels.triton.quant_linear import fp8_linear, int8_linear, woq_linear
from pagoda.kernels.triton.rotary import rotary_embedding
from pagoda.kernels.triton.sampling import sample_from_logits

__all__ = [
    "apply_token_bitmask",
    "fp8_linear",
    "fused_add_rms_norm",
    "fused_add_rms_norm_quant",
    "fused_moe",
    "gelu_and_mul",
    "int8_linear",
    "linear",
    "linear_with",
    "lora_expand",
    "lora_shrink",
    "num_kv_splits",
    "paged_attention",
    "rms_norm",
    "rotary_embedding",
    "sample_from_logits",
    "silu_and_mul",
    "silu_and_mul_quant",
    "woq_linear",
    "write_kv_cache",
]
