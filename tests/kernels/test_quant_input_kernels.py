"""The producers of a W8A8 linear's input quantized per token (`norm.fused_add_rms_norm_quant`,
`activation.silu_and_mul_quant`) give, bit for bit, what their unfused path gives (the norm or
activation kernel, then `quant_prims.quantize_activations`): codes, scales and the residual
sum, for every model type, both code types, widths over one chunk of the norm and rows of
odd counts; and fp8_linear / int8_linear given such an input (`QuantizedActivation`) return,
bit for bit, what they return for the dense x, where `quant_linear.quantized_input` says they
take one, and refuse it elsewhere."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
import torch

pytest.importorskip("triton")

from pagoda.kernels import triton as kernels  # noqa: E402
from pagoda.kernels.triton import activation, norm  # noqa: E402
from pagoda.kernels.triton import quant_linear as ql  # noqa: E402
from pagoda.kernels.triton.common import rows  # noqa: E402
from pagoda.kernels.triton.quant_prims import ONE_PASS_MAX, quantize_activations  # noqa: E402
from pagoda.quant.rtn import fp8_weight, int8_weight  # noqa: E402
from pagoda.quant.tensors import (  # noqa: E402
    FP8_DTYPE,
    MIN_SCALE,
    QuantizedActivation,
    quantize_per_token,
)
from pagoda.testing import DTYPES, dtype_name  # noqa: E402

CODES = (FP8_DTYPE, torch.int8)
WIDTHS = (8, 96, 1000, 2056)
"""Under one norm chunk (`norm.MAX_BLOCK`), not a power of two, and over two chunks."""
ROWS = (0, 1, 7)
EPS = 1e-6


def _code_name(code: torch.dtype) -> str:
    return "int8" if code == torch.int8 else "fp8"


def _same(got: QuantizedActivation, codes: torch.Tensor, scale: torch.Tensor) -> None:
    """Codes (as bytes: -0 is not +0) and scales bit for bit."""
    assert got.codes.dtype == codes.dtype and got.codes.shape == codes.shape
    assert got.scale.dtype == torch.float32 and got.scale.shape == (codes.shape[0], 1)
    assert torch.equal(got.codes.view(torch.uint8), codes.view(torch.uint8))
    assert torch.equal(got.scale, scale)


def _unfused_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                  code: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    normed, summed = kernels.fused_add_rms_norm(x, residual, weight, EPS)
    codes, scale = quantize_activations(rows(normed, x.shape[-1]), code == torch.int8)
    return codes, scale, summed


def _unfused_silu(x: torch.Tensor, code: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    return quantize_activations(rows(kernels.silu_and_mul(x), x.shape[-1] // 2),
                                code == torch.int8)


def _refuse(*_: Any, **__: Any) -> Any:
    raise AssertionError("this launch should not happen")


class _NoLaunch:
    """A kernel that must not be launched."""

    def __getitem__(self, grid: Any) -> Callable[..., Any]:
        return _refuse


@pytest.mark.parametrize("code", CODES, ids=_code_name)
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_name)
def test_norm_quant_is_the_unfused_path_bit_for_bit(dtype: torch.dtype, code: torch.dtype,
                                                    device: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    gen = torch.Generator().manual_seed(11)
    cases = []
    for width in WIDTHS:
        for m in ROWS:
            x = (torch.randn(m, width, generator=gen) * 3).to(dtype)
            residual = torch.randn(m, width, generator=gen).to(dtype)
            weight = (1 + 0.5 * torch.randn(width, generator=gen)).to(dtype)
            cases.append((x, residual, weight))
    # Leading dims, a float32 residual under 16-bit x, a strided x (a column slice).
    x = (torch.randn(2, 3, 96, generator=gen) * 3).to(dtype)
    cases.append((x, torch.randn(2, 3, 96, generator=gen), torch.randn(96, generator=gen)))
    wide = (torch.randn(5, 300, generator=gen) * 3).to(dtype)
    cases.append((wide[:, 50:250], torch.randn(5, 200, generator=gen).to(dtype),
                  torch.randn(200, generator=gen).to(dtype)))
    wanted = [_unfused_norm(*(t.to(device) for t in case), code) for case in cases]
    monkeypatch.setattr(norm, "_rms_norm_kernel", _NoLaunch())  # one launch: its own
    for (x, residual, weight), (codes, scale, summed) in zip(cases, wanted):
        got, got_sum = kernels.fused_add_rms_norm_quant(
            x.to(device), residual.to(device), weight.to(device), EPS, code)
        assert got.dtype == dtype
        assert got.shape == (x.numel() // x.shape[-1], x.shape[-1])
        _same(got, codes, scale)
        assert got_sum.shape == x.shape and torch.equal(got_sum, summed)


@pytest.mark.parametrize("code", CODES, ids=_code_name)
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_name)
def test_silu_quant_is_the_unfused_path_bit_for_bit(dtype: torch.dtype, code: torch.dtype,
                                                    device: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    gen = torch.Generator().manual_seed(12)
    cases = [(torch.randn(m, 2 * d, generator=gen) * 4).to(dtype)
             for d in WIDTHS for m in ROWS]
    cases.append((torch.randn(2, 3, 192, generator=gen) * 4).to(dtype))  # leading dims
    cases.append((torch.randn(5, 300, generator=gen) * 4).to(dtype)[:, 20:220])  # strided
    wanted = [_unfused_silu(x.to(device), code) for x in cases]
    monkeypatch.setattr(activation, "quantize_activations", _refuse)  # one launch: its own
    monkeypatch.setattr(activation, "_gated_kernel", _NoLaunch())
    for x, (codes, scale) in zip(cases, wanted):
        got = kernels.silu_and_mul_quant(x.to(device), code)
        assert got.dtype == dtype
        _same(got, codes, scale)


@pytest.mark.parametrize("code", CODES, ids=_code_name)
def test_silu_quant_rows_past_one_load_compose_the_unfused_kernels(
        code: torch.dtype, device: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """d = ONE_PASS_MAX takes the one-load kernel (16 warps); one more input, the
    activation kernel and the two-pass quantization."""
    gen = torch.Generator().manual_seed(13)
    for d, fused in ((ONE_PASS_MAX, True), (ONE_PASS_MAX + 24, False)):
        x = (torch.randn(1, 2 * d, generator=gen) * 4).to(torch.bfloat16).to(device)
        x[0, d // 3] = 60.0  # the amax far into the row
        codes, scale = _unfused_silu(x, code)
        with monkeypatch.context() as patch:
            if fused:
                patch.setattr(activation, "quantize_activations", _refuse)
            else:
                patch.setattr(activation, "_silu_and_mul_quant_kernel", _NoLaunch())
            got = kernels.silu_and_mul_quant(x, code)
        _same(got, codes, scale)
        assert got.dtype == torch.bfloat16


@pytest.mark.parametrize("code", CODES, ids=_code_name)
def test_all_zero_rows_get_the_smallest_scale(code: torch.dtype, device: str) -> None:
    """A row of zeros (x + residual = 0; gate or up 0) quantizes to zeros by MIN_SCALE, as
    the references do; the other rows as usual."""
    gen = torch.Generator().manual_seed(14)
    x = torch.randn(3, 96, generator=gen).to(torch.bfloat16)
    residual = torch.randn(3, 96, generator=gen).to(torch.bfloat16)
    residual[1] = -x[1]
    weight = torch.randn(96, generator=gen).to(torch.bfloat16)
    gated = torch.randn(3, 192, generator=gen).to(torch.bfloat16)
    gated[1, 96:] = 0.0
    x, residual, weight, gated = (t.to(device) for t in (x, residual, weight, gated))
    for got, dense in (
        (kernels.fused_add_rms_norm_quant(x, residual, weight, EPS, code)[0],
         kernels.fused_add_rms_norm(x, residual, weight, EPS)[0]),
        (kernels.silu_and_mul_quant(gated, code), kernels.silu_and_mul(gated)),
    ):
        want = quantize_per_token(dense.cpu(), code)
        assert torch.equal(got.scale.cpu()[1], torch.tensor([MIN_SCALE], dtype=torch.float32))
        assert torch.equal(got.scale.cpu(), want.scale)
        assert not got.codes.float().cpu()[1].any() and got.codes.float().cpu()[0].any()


def test_unknown_code_types_are_refused(device: str) -> None:
    x = torch.randn(2, 16, device=device)
    with pytest.raises(ValueError, match="quantize to"):
        kernels.silu_and_mul_quant(x, torch.float16)
    with pytest.raises(ValueError, match="quantize to"):
        kernels.fused_add_rms_norm_quant(x, x, torch.ones(16, device=device), EPS, torch.uint8)


def _weight(op: str, n: int, k: int, seed: int, **change: Any) -> Any:
    w = torch.randn(n, k, generator=torch.Generator().manual_seed(seed)) * k**-0.5
    if op == "int8_linear":
        return dataclasses.replace(ql.prepare_int8(int8_weight(w)), **change)
    return dataclasses.replace(ql.prepare_fp8(fp8_weight(w, change.pop("block", None))),
                               **change)


LINEARS = {"fp8_linear": (ql.fp8_linear, FP8_DTYPE), "int8_linear": (ql.int8_linear, torch.int8)}


def _on(weight: Any, device: str) -> Any:
    return weight.to(device)


@pytest.mark.parametrize("m", [5, 16, 17, 40])
@pytest.mark.parametrize("op", LINEARS)
def test_linears_given_quantized_x_match_the_dense_x(op: str, m: int, device: str) -> None:
    """The same codes and scales reach the same matmul (the pre-quantized gemv up to 16
    rows, the gemm after; torch._scaled_mm on CUDA for bfloat16): equal outputs, from the
    fused norm, the fused activation and the reference quantization alike."""
    linear, code = LINEARS[op]
    gen = torch.Generator().manual_seed(m)
    k, n = 96, 48  # multiples of 16: torch._scaled_mm's on CUDA
    weight = _on(_weight(op, n, k, m), device)
    bias = (torch.randn(n, generator=gen) * 0.1).to(torch.bfloat16).to(device)
    x = (torch.randn(m, k, generator=gen) * 2).to(torch.bfloat16).to(device)
    residual = torch.randn(m, k, generator=gen).to(torch.bfloat16).to(device)
    norm_w = torch.randn(k, generator=gen).to(torch.bfloat16).to(device)
    gated = (torch.randn(m, 2 * k, generator=gen) * 2).to(torch.bfloat16).to(device)
    assert ql.quantized_input(weight, m)
    pairs = (
        (kernels.fused_add_rms_norm_quant(x, residual, norm_w, EPS, code)[0],
         kernels.fused_add_rms_norm(x, residual, norm_w, EPS)[0]),
        (kernels.silu_and_mul_quant(gated, code), kernels.silu_and_mul(gated)),
        (quantize_per_token(x, code), x),
        (quantize_per_token(x.half(), code), x.half()),  # the output in the input's type
    )
    for given, dense in pairs:
        for b in (bias.to(dense.dtype), None):
            got = linear(given, weight, b)
            want = linear(dense, weight, b)
            assert got.dtype == dense.dtype and got.shape == (m, n)
            assert torch.equal(got, want)
    x3 = x.view(1, m, k)  # leading dims: the dense output keeps them, the codes are [M, K]
    assert torch.equal(linear(quantize_per_token(x3, code), weight), linear(x3, weight)[0])


def test_quantized_input_is_where_the_linear_quantizes_per_token() -> None:
    static = torch.tensor([0.02])
    cases = {
        ("fp8_linear", "per row"): _weight("fp8_linear", 32, 64, 0),
        ("int8_linear", "per row"): _weight("int8_linear", 32, 64, 0),
        ("fp8_linear", "static"): _weight("fp8_linear", 32, 64, 0, input_scale=static),
        ("int8_linear", "static"): _weight("int8_linear", 32, 64, 0, input_scale=static),
        ("fp8_linear", "blocked"): _weight("fp8_linear", 32, 64, 0, block=(16, 32)),
    }
    table = {key: [ql.quantized_input(w, m) for m in (0, 1, 4, 5, 17, 4096)]
             for key, w in cases.items()}
    assert table == {
        ("fp8_linear", "per row"): [False, False, False, True, True, True],
        ("int8_linear", "per row"): [False, False, False, True, True, True],
        ("fp8_linear", "static"): [False] * 6,
        ("int8_linear", "static"): [False] * 6,
        ("fp8_linear", "blocked"): [False] * 6,
    }


def test_quantized_x_is_refused_where_the_linear_would_not_take_it(device: str) -> None:
    x = torch.randn(8, 64, generator=torch.Generator().manual_seed(1)).to(device)
    fp8_x, int8_x = quantize_per_token(x, FP8_DTYPE), quantize_per_token(x, torch.int8)
    static = torch.tensor([0.02], device=device)
    refused = (
        (ql.fp8_linear, fp8_x, _weight("fp8_linear", 32, 64, 0, input_scale=static), "static"),
        (ql.int8_linear, int8_x, _weight("int8_linear", 32, 64, 0, input_scale=static),
         "static"),
        (ql.fp8_linear, fp8_x, _weight("fp8_linear", 32, 64, 0, block=(16, 32)), "group"),
        (ql.fp8_linear, quantize_per_token(x[:4], FP8_DTYPE), _weight("fp8_linear", 32, 64, 0),
         "4 rows"),
        (ql.int8_linear, fp8_x, _weight("int8_linear", 32, 64, 0), "to torch.int8"),
        (ql.fp8_linear, int8_x, _weight("fp8_linear", 32, 64, 0), "to torch.float8_e4m3fn"),
    )
    for linear, given, weight, why in refused:
        weight = _on(weight, device)
        with pytest.raises(ValueError, match=why):
            linear(given, weight)
    # The same inputs as dense x, and the same weights given what they take, run.
    assert ql.fp8_linear(x, _on(_weight("fp8_linear", 32, 64, 0, input_scale=static),
                                device)).shape == (8, 32)
    assert ql.int8_linear(int8_x, _on(_weight("int8_linear", 32, 64, 0), device)).shape == (8, 32)
