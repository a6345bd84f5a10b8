"""The one-row matmuls taking the op before them (`pagoda.kernels.triton.row_input`): the
dense gemv, the FP8 row kernel and the weight-only gemv, each given RMSNorm (with and
without the residual add) or SiLU-and-mul's inputs, return exactly what the op's own kernel
followed by the same matmul kernel returns (the same tiles, K splits included), and the
residual sum exactly `fused_add_rms_norm`'s; a qkv kernel rotating its heads
(`row_rotary`) returns what the rotary kernel makes of its output."""

from __future__ import annotations

import dataclasses

import pytest
import torch

pytest.importorskip("triton")

from pagoda.kernels import triton as kernels  # noqa: E402
from pagoda.kernels.triton import quant_linear as ql  # noqa: E402
from pagoda.kernels.triton.common import GemvTiles  # noqa: E402
from pagoda.kernels.triton.gemv import GemvPlan, linear_with  # noqa: E402
from pagoda.kernels.triton.row_gemv import fp8_row_gemv  # noqa: E402
from pagoda.kernels.triton.row_input import RowInput  # noqa: E402
from pagoda.kernels.triton.row_rotary import RowRotary  # noqa: E402
from pagoda.kernels.triton.woq_gemm import PackedGroupWeight, woq_gemv  # noqa: E402
from pagoda.quant.rtn import fp8_weight, group_weight  # noqa: E402
from pagoda.quant.tensors import GroupQuantWeight  # noqa: E402

K, N = 1152, 40  # K: nine 128-groups, not whole 256-wide tiles; over norm.MAX_BLOCK
INPUTS = ("norm", "add + norm", "silu_and_mul")


def _row(gen: torch.Generator, kind: str, dtype: torch.dtype, device: str
         ) -> tuple[RowInput, torch.Tensor, torch.Tensor | None]:
    """(the row input, the op's own output, fused_add_rms_norm's sum or None)."""
    def randn(*shape: int, scale: float = 1.0) -> torch.Tensor:
        return (torch.randn(shape, generator=gen) * scale).to(dtype).to(device)

    if kind == "silu_and_mul":
        x = randn(1, 2 * K, scale=2.0)
        return RowInput.gated(x), kernels.silu_and_mul(x), None
    x, weight = randn(1, K, scale=3.0), randn(K) + 1.0
    if kind == "norm":
        return RowInput.normed(x, weight, 1e-5), kernels.rms_norm(x, weight, 1e-5), None
    residual = randn(1, K)
    normed, summed = kernels.fused_add_rms_norm(x, residual, weight, 1e-5)
    return RowInput.normed(x, weight, 1e-5, residual), normed, summed


def _packed(weight: GroupQuantWeight, device: str) -> PackedGroupWeight:
    packed = ql.prepare_woq(weight)
    return dataclasses.replace(packed, words=packed.words.to(device),
                               scales=packed.scales.to(device),
                               offsets=packed.offsets.to(device))


def _check(row: RowInput, summed: torch.Tensor | None, got: torch.Tensor,
           want: torch.Tensor) -> None:
    assert torch.equal(got, want)
    if summed is not None:
        assert row.summed is not None and torch.equal(row.summed, summed)


@pytest.mark.parametrize("plan", [GemvPlan(8, 128, use_dot=False),
                                  GemvPlan(8, 64, use_dot=False, num_splits=3)],
                         ids=lambda p: p.label)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("kind", INPUTS)
def test_dense_gemv(kind: str, dtype: torch.dtype, plan: GemvPlan, device: str) -> None:
    gen = torch.Generator().manual_seed(1)
    row, x, summed = _row(gen, kind, dtype, device)
    w = (torch.randn(N, K, generator=gen) * K**-0.5).to(dtype).to(device)
    bias = torch.randn(N, generator=gen).to(dtype).to(device)
    _check(row, summed, linear_with(row, w, bias, plan), linear_with(x, w, bias, plan))


@pytest.mark.parametrize("plan", [GemvTiles(16, 256), GemvTiles(8, 64, num_splits=3)],
                         ids=lambda p: p.label)
@pytest.mark.parametrize("static", [False, True], ids=["per-token", "static"])
@pytest.mark.parametrize("kind", INPUTS)
def test_fp8_row_gemv(kind: str, static: bool, plan: GemvTiles, device: str) -> None:
    gen = torch.Generator().manual_seed(2)
    row, x, summed = _row(gen, kind, torch.bfloat16, device)
    weight = fp8_weight(torch.randn(N, K, generator=gen) * K**-0.5)
    if static:
        weight = dataclasses.replace(weight, input_scale=torch.tensor(0.05))
    w = ql.prepare_fp8(weight)
    w_scale, codes = w.scale.to(device), w.weight.to(device)
    xs = w.input_scale.to(device) if static else None

    def run(inp: torch.Tensor | RowInput) -> torch.Tensor:
        out = torch.empty(1, N, dtype=torch.bfloat16, device=device)
        return fp8_row_gemv(out, inp, xs, codes, w_scale, None, plan)

    _check(row, summed, run(row), run(x))


@pytest.mark.parametrize("plan", [GemvTiles(8, 256), GemvTiles(4, 128, num_splits=2)],
                         ids=lambda p: p.label)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
@pytest.mark.parametrize("kind", INPUTS)
def test_woq_gemv(kind: str, dtype: torch.dtype, plan: GemvTiles, device: str) -> None:
    gen = torch.Generator().manual_seed(3)
    row, x, summed = _row(gen, kind, dtype, device)
    weight = group_weight((torch.randn(N, K, generator=gen) * K**-0.5).to(dtype), 4, 128,
                          False)
    packed = _packed(weight, device)

    def run(inp: torch.Tensor | RowInput) -> torch.Tensor:
        return woq_gemv(torch.empty(1, N, dtype=dtype, device=device), inp, packed, None, plan)

    _check(row, summed, run(row), run(x))


HEADS, KV_HEADS, HEAD = 2, 1, 32
QKV = (HEADS + 2 * KV_HEADS) * HEAD


def _rotated(out: torch.Tensor, positions: torch.Tensor, cos_sin: torch.Tensor,
             is_neox: bool) -> torch.Tensor:
    """The rotary kernel applied to a qkv output [1, QKV], as the layer runs it op by op."""
    q, k, v = out.split([HEADS * HEAD, KV_HEADS * HEAD, KV_HEADS * HEAD], dim=-1)
    q, k = kernels.rotary_embedding(positions, q.view(1, HEADS, HEAD),
                                    k.view(1, KV_HEADS, HEAD), cos_sin, is_neox)
    return torch.cat([q.reshape(1, -1), k.reshape(1, -1), v], dim=-1)


@pytest.mark.parametrize("is_neox", [True, False], ids=["neox", "gptj"])
@pytest.mark.parametrize("matmul", ["dense", "fp8", "int4"])
def test_rotary_epilogue(matmul: str, is_neox: bool, device: str) -> None:
    """The qkv kernel rotating its query and key heads stores what it and the rotary kernel
    store op by op (value heads unrotated), after an add + RMSNorm."""
    gen = torch.Generator().manual_seed(5)
    row, x, _ = _row(gen, "add + norm", torch.bfloat16, device)
    w = torch.randn(QKV, K, generator=gen) * K**-0.5
    positions = torch.tensor([37], device=device)
    angles = torch.arange(64)[:, None] * torch.rand(HEAD // 2, generator=gen)[None, :]
    cos_sin = torch.cat([angles.cos(), angles.sin()], dim=-1).to(device)
    rotary = RowRotary(positions, cos_sin, is_neox, HEAD, (HEADS + KV_HEADS) * HEAD)
    if matmul == "dense":
        wd = w.to(torch.bfloat16).to(device)
        plan = GemvPlan(8, 128, use_dot=False)

        def run(inp, rot=None):
            return linear_with(inp, wd, None, plan, rotary=rot)
    elif matmul == "fp8":
        wq = ql.prepare_fp8(fp8_weight(w))
        codes, scale = wq.weight.to(device), wq.scale.to(device)

        def run(inp, rot=None):
            out = torch.empty(1, QKV, dtype=torch.bfloat16, device=device)
            return fp8_row_gemv(out, inp, None, codes, scale, None, GemvTiles(16, 128),
                                rotary=rot)
    else:
        packed = _packed(group_weight(w.to(torch.bfloat16), 4, 128, False), device)

        def run(inp, rot=None):
            out = torch.empty(1, QKV, dtype=torch.bfloat16, device=device)
            return woq_gemv(out, inp, packed, None, GemvTiles(8, 256), rotary=rot)

    assert RowRotary.fits(QKV, 8, 1, HEAD, HEAD) and RowRotary.fits(QKV, 16, 1, HEAD, HEAD)
    assert torch.equal(run(row, rotary), _rotated(run(x), positions, cos_sin, is_neox))
