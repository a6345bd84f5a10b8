"""A weight-only quantized weight held in a 16-bit model (`in_model_dtype`): its scales in
the model's type, its offsets float32 and scaled with them, so that an integer zero point
stays exact and no group's weights shift by a common rounding error."""

from __future__ import annotations

import pytest
import torch

from pagoda.quant.op_method import in_model_dtype
from pagoda.quant.rtn import group_weight
from pagoda.quant.tensors import GroupQuantWeight

DTYPES = [torch.bfloat16, torch.float16]


def _asymmetric(seed: int = 0) -> GroupQuantWeight:
    gen = torch.Generator().manual_seed(seed)
    return group_weight(torch.randn(64, 512, generator=gen) / 20, 4, 32, symmetric=False)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_integer_zero_points_stay_exact(dtype: torch.dtype) -> None:
    canonical = _asymmetric()
    zeros = (-canonical.offsets / canonical.scales).round()
    held = in_model_dtype(canonical, dtype)
    assert held.scales.dtype == dtype and held.offsets.dtype == torch.float32
    assert torch.equal(held.codes, canonical.codes)
    scales = held.scales.float()
    # (code - z) * s' for every weight, to float32's rounding of code * s' + o'
    want = (held.codes.float().view(64, -1, 32) - zeros[..., None]) * scales[..., None]
    ulp = 2**-23 * 16 * scales.max()
    assert torch.allclose(held.dequantize(), want.view(64, 512), rtol=0, atol=ulp)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_each_group_only_scales(dtype: torch.dtype) -> None:
    """Any offsets (GGUF Q4_1's minimum too): each group's weights are the float32 ones
    times s' / s, so the error of a weight is proportional to it; holding the offsets in
    the 16-bit type instead shifts whole groups (the error this replaces)."""
    canonical = _asymmetric(1)
    q4_1 = GroupQuantWeight(canonical.codes, canonical.scales,
                            canonical.offsets + 0.37 * canonical.scales)
    exact = q4_1.dequantize()
    held = in_model_dtype(q4_1, dtype).dequantize()
    ratio = (q4_1.scales.to(dtype).float() / q4_1.scales).repeat_interleave(32, dim=1)
    ulp = 2**-23 * 16 * q4_1.scales.max()
    assert torch.allclose(held, exact * ratio, rtol=0, atol=ulp)
    rounded = GroupQuantWeight(q4_1.codes, q4_1.scales.to(dtype), q4_1.offsets.to(dtype))
    mean_shift = lambda w: (w - exact).view(64, -1, 32).mean(-1).abs().max()  # noqa: E731
    assert mean_shift(held) < mean_shift(rounded.dequantize().float()) / 4


def test_float32_models_and_held_weights_are_left_alone() -> None:
    canonical = _asymmetric()
    assert in_model_dtype(canonical, torch.float32) is canonical
    held = in_model_dtype(canonical, torch.bfloat16)
    assert in_model_dtype(held, torch.bfloat16) is held
