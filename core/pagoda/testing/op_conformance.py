"""Check one implementation of a core op against its reference, case by case.

The reference runs on the host, the implementation on `device`, both on copies of the same
inputs. Outputs must match in shape, dtype and value (per-dtype tolerance), and inputs
must be left unchanged.
"""

from __future__ import annotations

import dataclasses
import traceback
from collections.abc import Callable
from typing import Any

import torch

from pagoda.ops.registry import OPS, unusable_reason
from pagoda.plugins.lazy import load_target
from pagoda.plugins.specs import KernelProvider
from pagoda.quant.tensors import QuantizedActivation, quantize_per_token
from pagoda.testing.collective_conformance import COLLECTIVE_OPS, check_collective
from pagoda.testing.op_cases import op_cases
from pagoda.testing.report import ConformanceReport
from pagoda.testing.tolerances import (
    QUANTIZED_VALUES,
    Tolerance,
    dtype_name,
    mismatch,
    op_tolerance,
)


def _copy(value: Any, device: torch.device | str) -> Any:
    """A copy of a tensor, or of a dataclass of tensors (a quantized weight), on `device`."""
    if isinstance(value, torch.Tensor):
        return value.clone().to(device)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.replace(value, **{f.name: _copy(getattr(value, f.name), device)
                                             for f in dataclasses.fields(value)})
    return value


def _copy_args(args: dict[str, Any], device: torch.device | str) -> dict[str, Any]:
    return {k: _copy(v, device) for k, v in args.items()}


def _same(a: Any, b: Any) -> bool:
    if isinstance(b, torch.Tensor):
        return torch.equal(a.detach().cpu(), b)
    if dataclasses.is_dataclass(b) and not isinstance(b, type):
        return all(_same(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(b))
    return True


def _outputs(result: Any) -> dict[str, Any]:
    """Name -> tensor (or `QuantizedActivation`) of everything the call produced."""
    if isinstance(result, (tuple, list)):
        return {f"output[{i}]": r for i, r in enumerate(result)}
    return {"output": result}


def _quantized_mismatch(name: str, got: Any, want: QuantizedActivation,
                        tol: Tolerance) -> list[str]:
    """Activations quantized per token: the same code type and dtype, the scales within
    `tol`, the values (codes * scale) within `QUANTIZED_VALUES`."""
    if not isinstance(got, QuantizedActivation):
        return [f"{name}: expected a QuantizedActivation, got {type(got).__name__}"]
    if (got.codes.dtype, got.dtype) != (want.codes.dtype, want.dtype):
        return [f"{name}: codes {dtype_name(got.codes.dtype)} of {dtype_name(got.dtype)} != "
                f"expected {dtype_name(want.codes.dtype)} of {dtype_name(want.dtype)}"]
    return [m for m in (mismatch(f"{name}.scale", got.scale, want.scale, tol),
                        mismatch(f"{name} (codes * scale)", got.dequantize(), want.dequantize(),
                                 QUANTIZED_VALUES)) if m]


def _compare(got: dict[str, Any], want: dict[str, Any], tol: Tolerance) -> list[str]:
    if sorted(got) != sorted(want):
        return [f"returned {sorted(got)}, the reference returns {sorted(want)}"]
    problems = []
    for name, value in want.items():
        if isinstance(value, QuantizedActivation):
            problems += _quantized_mismatch(name, got[name], value, tol)
        elif m := mismatch(name, got[name], value, tol):
            problems.append(m)
    return problems


def _mutated(args: dict[str, Any], used: dict[str, Any]) -> list[str]:
    return [f"modified its input {name!r} in place"
            for name, value in args.items() if not _same(used[name], value)]


def check_op(
    op: str,
    impl: Callable[..., Any],
    dtype: torch.dtype,
    *,
    device: torch.device | str = "cpu",
    seed: int = 0,
    unusable: Callable[..., str | None] | None = None,
    subject: str | None = None,
    prepare: Callable[..., Any] | None = None,
    quantized_input: Callable[[Any, int], bool] | None = None,
) -> ConformanceReport:
    """Run `impl` on every case of `op` in `dtype` and compare it to the reference.

    `unusable(**static_args)` returns why a case is out of the implementation's scope (it is
    then skipped), or None. `prepare` (a quantized linear's) turns the case's `weight` into
    what `impl` takes, as at load. `quantized_input` (a W8A8 linear's,
    `KernelProvider.quantized_input`): each case whose x it takes quantized runs again with
    x quantized per token (`quantize_per_token`, to the weight's code type).
    """
    reference = OPS[op].reference
    tol = op_tolerance(op, dtype)
    report = ConformanceReport(subject or f"{op} in {dtype_name(dtype)} (seed {seed})")

    def run(label: str, args: dict[str, Any]) -> Any:
        """The case's prepared weight (or None), after checking it; None where it raised."""
        want = _outputs(reference(*_copy_args(args, "cpu").values()))
        used = _copy_args(args, device)
        try:
            call = dict(used)
            if prepare is not None:
                call["weight"] = prepare(call["weight"], dtype)
            got = _outputs(impl(*call.values()))
        except Exception as exc:
            tb = traceback.format_exc(limit=-3).rstrip().replace("\n", "\n    ")
            report.failures.append(f"{label}: raised {exc!r}\n    {tb}")
            return None
        problems = _compare(got, want, tol) + _mutated(args, used)
        if problems:
            report.failures.append(f"{label}: " + "; ".join(problems))
        else:
            report.checked.append(label)
        return call.get("weight")

    for case in op_cases(op, dtype, seed):
        reason = unusable(**case.static_args) if unusable else None
        if reason:
            report.skipped.append(f"{case.label}: {reason}")
            continue
        weight = run(case.label, case.args)
        x = case.args.get("x")
        if (quantized_input is not None and weight is not None
                and quantized_input(weight, x.shape[:-1].numel())):
            given = quantize_per_token(x, case.args["weight"].weight.dtype)
            run(f"{case.label} (x given quantized)", {**case.args, "x": given})
    return report


def check_kernel_provider(
    provider: KernelProvider,
    dtype: torch.dtype,
    *,
    plugin: str = "?",
    device: torch.device | str = "cpu",
    seed: int = 0,
    platform: str = "cpu",
) -> ConformanceReport:
    """Check a registered provider; cases it declines (is_available / supports) are skipped.
    A provider of an op core does not declare fails. A collective (`all_reduce`) runs on
    two ranks of `platform` (`check_collective`)."""
    subject = f"{provider.op} by {plugin}/{provider.name} in {dtype_name(dtype)} (seed {seed})"
    if provider.op not in OPS:
        report = ConformanceReport(subject)
        report.failures.append(f"registration: {provider.op!r} is not a core op (known: "
                               f"{', '.join(OPS)}); nothing would ever call this provider")
        return report
    if provider.op in COLLECTIVE_OPS:
        reason = unusable_reason(provider, dtype=dtype)
        if reason:
            report = ConformanceReport(subject)
            report.skipped.append(f"every case: {reason}")
            return report
        return check_collective(provider.op, provider.impl, dtype, platform=platform,
                                seed=seed, subject=subject)
    return check_op(
        provider.op,
        load_target(provider.impl),
        dtype,
        device=device,
        seed=seed,
        unusable=lambda **static: unusable_reason(provider, **static),
        subject=subject,
        prepare=load_target(provider.prepare) if provider.prepare else None,
        quantized_input=(load_target(provider.quantized_input) if provider.quantized_input
                         else None),
    )
