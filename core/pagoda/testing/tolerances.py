"""Per-dtype tolerances and the comparison every conformance check uses."""

from __future__ import annotations

from dataclasses import dataclass

import torch

DTYPES: tuple[torch.dtype, ...] = (torch.float32, torch.bfloat16, torch.float16)
"""The model dtypes the conformance kit exercises (a provider may decline some)."""


@dataclass(frozen=True)
class Tolerance:
    """|actual - expected| <= atol + rtol * |expected|, elementwise."""

    atol: float
    rtol: float


# About two units in the last place of each dtype: a provider may round differently from
# the reference (fused kernels, another accumulation order), not compute something else.
TOLERANCES: dict[torch.dtype, Tolerance] = {
    torch.float32: Tolerance(atol=1e-5, rtol=1e-5),
    torch.float16: Tolerance(atol=2e-3, rtol=2e-3),
    torch.bfloat16: Tolerance(atol=1.6e-2, rtol=1.6e-2),
}


QUANT_FLOORS: dict[str, Tolerance] = {
    # One activation rounded to the neighbouring e4m3 step (1/8 of its magnitude: 0.5 at
    # |x| ~ 6) times a weight of ~0.2 moves an output by ~0.1.
    "fp8_linear": Tolerance(atol=0.12, rtol=0.05),
    # One int8 step (amax / 127 ~ 0.05) times the same weight: ~0.01.
    "int8_linear": Tolerance(atol=2e-2, rtol=2e-2),
    # No activation rounding: only the accumulation order and the scales' dtype.
    "woq_linear": Tolerance(atol=1e-4, rtol=1e-4),
}


QUANTIZED_VALUES = Tolerance(atol=0.04, rtol=0.13)
"""Activations an op returns quantized (`QuantizedActivation`), compared as codes * scale:
a provider whose value before quantization is an ulp off the reference's may round it to
the neighbouring code, one e4m3 step (up to 1/8 of the value) or one int8 step (amax / 127,
~0.03 for the conformance inputs' normed rows); a wrong scale or code is off by more."""


def op_tolerance(op: str, dtype: torch.dtype) -> Tolerance:
    """The tolerance for `op`'s outputs in `dtype`. The quantized linears sum long products
    of quantized values: a kernel may round an activation to the neighbouring float8 (or
    int8) step where the reference does not (a reciprocal instead of a division), and
    accumulate in another order, so they get looser bounds (`QUANT_FLOORS`, for the
    conformance inputs' magnitudes); a wrong scale, group or zero point is off by far
    more."""
    tol = TOLERANCES[dtype]
    floor = QUANT_FLOORS.get(op)
    if floor is None:
        return tol
    return Tolerance(atol=max(tol.atol, floor.atol), rtol=max(tol.rtol, floor.rtol))


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def mismatch(
    name: str, actual: object, expected: torch.Tensor, tol: Tolerance
) -> str | None:
    """Why `actual` does not match `expected` within `tol`, or None when it does."""
    if not isinstance(actual, torch.Tensor):
        return f"{name}: expected a tensor, got {type(actual).__name__}"
    if tuple(actual.shape) != tuple(expected.shape):
        return f"{name}: shape {tuple(actual.shape)} != expected {tuple(expected.shape)}"
    if actual.dtype != expected.dtype:
        return f"{name}: dtype {dtype_name(actual.dtype)} != expected {dtype_name(expected.dtype)}"
    if not expected.is_floating_point():  # ids, indices, flags: exactly or not at all
        got, want = actual.detach().cpu(), expected.detach().cpu()
        wrong = got != want
        if not bool(wrong.any()):
            return None
        first = tuple(int(i) for i in wrong.nonzero()[0])
        return (f"{name}: {int(wrong.sum())}/{wrong.numel()} elements differ; first at "
                f"{list(first)}: got {got[first].item()}, expected {want[first].item()}")
    got, want = actual.detach().cpu().float(), expected.detach().cpu().float()
    close = torch.isclose(got, want, rtol=tol.rtol, atol=tol.atol, equal_nan=True)
    if bool(close.all()):
        return None
    err = (got - want).abs().nan_to_num(nan=float("inf"))
    err[close] = 0
    worst = tuple(int(i) for i in torch.unravel_index(err.argmax(), err.shape))
    bad = int((~close).sum())
    return (
        f"{name}: {bad}/{close.numel()} elements beyond atol={tol.atol:g} rtol={tol.rtol:g}; "
        f"worst at {list(worst)}: got {got[worst].item():.6g}, expected {want[worst].item():.6g}"
    )
