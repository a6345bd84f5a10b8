"""A decoder layer's one-sequence decode step in four Triton kernels around its attention
(`Platform.fuse_decode_layer` for platforms running the shared kernels).

Op by op, a layer of a one-token step runs eight kernels besides its attention: RMSNorm
(with the residual add), qkv, rotary, o, add + RMSNorm, gate_up, SiLU-and-mul, down. Here
the one-row matmuls compute their own inputs (`row_input.RowInput`): the qkv and gate_up
kernels the residual add and RMSNorm before them (unless `fuse_norms` is off: then the
norm kernels run), the down kernel the SiLU-and-mul; and the qkv kernel rotates the query
and key heads it outputs (`row_rotary.RowRotary`, where its tiles allow; else the rotary
kernel runs), so a layer runs qkv, o, gate_up and down. Each matmul is the kernel its op
would have run for one row (`gemv.linear`, `fp8_linear`'s row kernel, `woq_linear`'s
gemv) with the same tiles, and each fused op is computed as its own kernel computes it,
so the layer's results are the op-by-op ones (bit for bit in Triton's interpreter; on a
GPU to float32's rounding, the compiled kernels ordering their sums by their own
layouts). A layer is fused only where every op the spec names is the platform's launcher
of these kernels (so nothing else would have run) and every linear has a one-row kernel,
here or among the platform's own (`fuse_decode_layer`'s `row_matmuls`, e.g. pagoda-cuda's
CUDA C++ kernel, which computes the normed inputs but rotates nothing).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from pagoda.kernels.triton import gemv
from pagoda.kernels.triton.common import GemvTiles, parallel_units
from pagoda.kernels.triton.gemv import GemvPlan
from pagoda.kernels.triton.launched import LaunchedKernels
from pagoda.kernels.triton.row_gemv import fp8_ok_for_row, fp8_row_gemv, plan_row_gemv
from pagoda.kernels.triton.row_input import RowInput
from pagoda.kernels.triton.row_rotary import RowRotary
from pagoda.kernels.triton.woq_gemm import PackedGroupWeight, plan_woq_gemv, woq_gemv
from pagoda.models.decode_fusion import DecodeLayerSpec, FusableLinear
from pagoda.quant.tensors import Fp8Weight


@dataclass(frozen=True)
class RowMatmul:
    """A linear layer of one row through one of the one-row kernels: [1, N] from a row
    input, its heads rotated where a `RowRotary` is given (a kernel tiled as `tiles` says;
    None: a kernel without the rotary epilogue, never given one)."""

    run: Callable[[RowInput, RowRotary | None], torch.Tensor]
    n: int
    tiles: GemvTiles | GemvPlan | None

    def __call__(self, row: RowInput, rotary: RowRotary | None = None) -> torch.Tensor:
        return self.run(row, rotary)

    def rotates(self, head_size: int, rot_dim: int) -> bool:
        """Whether its epilogue can rotate heads of `head_size` (`RowRotary.fits`)."""
        return self.tiles is not None and RowRotary.fits(
            self.n, self.tiles.block_n, self.tiles.num_splits, head_size, rot_dim)


RowMatmulBuilder = Callable[[FusableLinear], RowMatmul | None]
"""A platform's own one-row kernel for a linear (`fuse_decode_layer`'s `row_matmuls`), or
None where it has none for it."""


def row_matmul(linear: FusableLinear, kernels: LaunchedKernels) -> RowMatmul | None:
    """The linear as a one-row kernel taking a `RowInput`, where its op is one of `kernels`'
    with a one-row kernel for its weight (as the op itself would choose it); else None."""
    w, bias = linear.weight, linear.bias
    if linear.op is kernels.linear and isinstance(w, torch.Tensor):
        return _dense(w, bias, kernels) if w.dtype in gemv.KERNEL_DTYPES else None
    if (linear.op is kernels.fp8_linear and isinstance(w, Fp8Weight) and w.block is None
            and fp8_ok_for_row(w.weight)):
        return _fp8(w, bias, kernels)
    if (linear.op is kernels.woq_linear and isinstance(w, PackedGroupWeight)
            and not w.act_block):  # the one-row kernel takes x as it is
        return _woq(w, bias, kernels)
    return None


def _dense(w: torch.Tensor, bias: torch.Tensor | None, kernels: LaunchedKernels) -> RowMatmul:
    launch = kernels.launch_for(w.device)
    n, k = w.shape
    plan = gemv.plan_gemv(1, n, k, parallel_units(w.device), w.element_size(), launch)
    return RowMatmul(lambda row, rotary: gemv.linear_with(row, w, bias, plan, launch=launch,
                                                          rotary=rotary), n, plan)


def _fp8(w: Fp8Weight, bias: torch.Tensor | None, kernels: LaunchedKernels) -> RowMatmul:
    launch = kernels.launch_for(w.weight.device)
    n, k = w.shape
    tiles = plan_row_gemv(n, k, parallel_units(w.weight.device))
    return RowMatmul(lambda row, rotary: fp8_row_gemv(
        _out(row, n), row, w.input_scale, w.weight, w.scale, bias, tiles, launch=launch,
        rotary=rotary), n, tiles)


def _woq(w: PackedGroupWeight, bias: torch.Tensor | None, kernels: LaunchedKernels
         ) -> RowMatmul:
    launch = kernels.launch_for(w.words.device)
    n, k = w.shape
    tiles = plan_woq_gemv(1, n, k, w.group_size, parallel_units(w.words.device))
    return RowMatmul(lambda row, rotary: woq_gemv(_out(row, n), row, w, bias, tiles,
                                                  launch=launch, rotary=rotary), n, tiles)


def _out(row: RowInput, n: int) -> torch.Tensor:
    return torch.empty((1, n), dtype=row.x.dtype, device=row.x.device)


class TritonDecodeLayer:
    """`FusedDecodeLayer` of one-token steps of one sequence (see the module docstring)."""

    max_rows = 1
    """The one-row kernels' limit: more rows run op by op (the gemv serves one row, and
    several sequences' steps go to cuBLAS and the tiled kernels)."""

    def __init__(self, spec: DecodeLayerSpec, qkv: RowMatmul, o: RowMatmul,
                 gate_up: RowMatmul, down: RowMatmul, *, fuse_norms: bool = True):
        self.spec = spec
        self.fuse_norms = fuse_norms
        """Whether the qkv and gate_up kernels compute the residual add and RMSNorm before
        them (each of their programs sums the row's squares first); else the norm kernels
        run, and only the rotary embedding and SiLU-and-mul are fused."""
        self.qkv, self.o, self.gate_up, self.down = qkv, o, gate_up, down
        q_size = spec.num_heads * spec.head_size
        kv_size = spec.num_kv_heads * spec.head_size
        self.qkv_sizes = [q_size, kv_size, kv_size]
        self.rotates = qkv.rotates(spec.head_size, spec.cos_sin_cache.shape[-1])
        """Whether the qkv kernel rotates the query and key heads (else the rotary op)."""
        self._last_rotary: RowRotary | None = None

    def _rotary(self, positions: torch.Tensor) -> RowRotary:
        """The qkv kernel's rotation at `positions`, built once per positions tensor (the
        same tensor every step under a graph; every layer of a step shares it)."""
        if self._last_rotary is None or self._last_rotary.positions is not positions:
            spec = self.spec
            self._last_rotary = RowRotary(positions, spec.cos_sin_cache, spec.is_neox,
                                          spec.head_size, self.qkv_sizes[0] + self.qkv_sizes[1])
        return self._last_rotary

    def pre_attention(self, positions: torch.Tensor, hidden_states: torch.Tensor,
                      residual: torch.Tensor | None
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        spec = self.spec
        row, summed = self._normed(hidden_states, spec.input_norm, residual)
        rotary = self._rotary(positions) if self.rotates else None
        q, k, v = self.qkv(row, rotary).split(self.qkv_sizes, dim=-1)
        d = spec.head_size
        q, k = q.view(1, spec.num_heads, d), k.view(1, spec.num_kv_heads, d)
        if not self.rotates:
            q, k = spec.rotary_embedding(positions, q, k, spec.cos_sin_cache, spec.is_neox)
        summed = summed if summed is not None else hidden_states
        return q, k, v.view(1, spec.num_kv_heads, d), summed

    def post_attention(self, attn_out: torch.Tensor, residual: torch.Tensor
                       ) -> tuple[torch.Tensor, torch.Tensor]:
        row, summed = self._normed(self.o(RowInput.plain(attn_out)),
                                   self.spec.post_attention_norm, residual)
        assert summed is not None
        return self.down(RowInput.gated(self.gate_up(row))), summed

    def _normed(self, x: torch.Tensor, weight: torch.Tensor, residual: torch.Tensor | None
                ) -> tuple[RowInput, torch.Tensor | None]:
        """The next matmul's input, rms_norm(x (+ residual)), and x + residual if given."""
        spec = self.spec
        if self.fuse_norms:
            row = RowInput.normed(x, weight, spec.eps, residual)
            return row, row.summed
        if residual is None:
            return RowInput.plain(spec.rms_norm(x, weight, spec.eps)), None
        normed, summed = spec.fused_add_rms_norm(x, residual, weight, spec.eps)
        return RowInput.plain(normed), summed


def fuse_decode_layer(spec: DecodeLayerSpec, kernels: LaunchedKernels, *,
                      fuse_norms: bool = True, quantized: bool = True,
                      row_matmuls: Sequence[RowMatmulBuilder] = ()) -> Any | None:
    """A `TritonDecodeLayer` for the layer where its ops are `kernels`' launchers and each
    linear has a one-row kernel: the platform's first of `row_matmuls` that takes it, else
    the one here (for unquantized weights only, unless `quantized`); else None (the layer
    runs op by op)."""
    if (spec.rms_norm is not kernels.rms_norm
            or spec.fused_add_rms_norm is not kernels.fused_add_rms_norm
            or spec.rotary_embedding is not kernels.rotary_embedding
            or spec.act_and_mul is not kernels.silu_and_mul):
        return None
    matmuls = [_row_matmul(linear, kernels, quantized, row_matmuls)
               for linear in (spec.qkv, spec.o, spec.gate_up, spec.down)]
    qkv, o, gate_up, down = matmuls
    if qkv is None or o is None or gate_up is None or down is None:
        return None
    return TritonDecodeLayer(spec, qkv, o, gate_up, down, fuse_norms=fuse_norms)


def _row_matmul(linear: FusableLinear, kernels: LaunchedKernels, quantized: bool,
                platform_kernels: Sequence[RowMatmulBuilder]) -> RowMatmul | None:
    for build in platform_kernels:
        if (found := build(linear)) is not None:
            return found
    if not quantized and not isinstance(linear.weight, torch.Tensor):
        return None
    return row_matmul(linear, kernels)
