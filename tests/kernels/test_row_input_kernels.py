"""The one-row matmuls taking the op before them (`pagoda.kernels.triton.row_input`): the
dense gemv, the FP8 row kernel and the weight-only gemv, each given RMSNorm (with and
without the residual add) or SiLU-and-mul's inputs, return exactly what the op's own kernel
followed by the same matmul kernel returns (the same tiles, K splits included), and the
residual sum exactly `fused_add_rms_norm`'s."""

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
from pagoda.kernels.triton.woq_gemm import woq_gemv  # noqa: E402
from pagoda.quant.rtn import fp8_weight, group_weight  # noqa: E402

K, N = 384, 40  # K: three 128-groups, not a whole number of 256-wide tiles
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
    packed = ql.prepare_woq(weight)
    packed = type(packed)(*(t.to(device) if isinstance(t, torch.Tensor) else t
                            for t in (packed.words, packed.scales, packed.offsets,
                                      packed.bits, packed.group_size)))

    def run(inp: torch.Tensor | RowInput) -> torch.Tensor:
        return woq_gemv(torch.empty(1, N, dtype=dtype, device=device), inp, packed, None, plan)

    _check(row, summed, run(row), run(x))
