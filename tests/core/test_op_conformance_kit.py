"""The op conformance kit tells right from wrong: correct implementations pass, and each
deliberately broken one fails, only on cases that exercise its bug."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from pagoda.ops import OPS, reference
from pagoda.plugins import KernelProvider
from pagoda.testing import check_kernel_provider, check_op, op_cases
from pagoda.testing.collective_conformance import COLLECTIVE_OPS


def _ignores_bias(x, weight, bias=None):
    return F.linear(x, weight)


def _flattens_leading_dims(x, weight, bias=None):
    return F.linear(x.reshape(-1, x.shape[-1]), weight, bias)


def _float_linear(x, weight, bias=None):
    return F.linear(x.float(), weight.float(), None if bias is None else bias.float())


def _no_eps_rms_norm(x, weight, eps):
    return reference.rms_norm(x, weight, 0.0)


def _unweighted_rms_norm(x, weight, eps):
    return reference.rms_norm(x, torch.ones_like(weight), eps)


def _wrong_residual(x, residual, weight, eps):
    return reference.fused_add_rms_norm(x, residual, weight, eps)[0], x


def _always_neox(positions, query, key, cos_sin_cache, is_neox):
    return reference.rotary_embedding(positions, query, key, cos_sin_cache, True)


def _zeroes_unrotated_dims(positions, query, key, cos_sin_cache, is_neox):
    q, k = reference.rotary_embedding(positions, query, key, cos_sin_cache, is_neox)
    rot = cos_sin_cache.shape[-1]
    q[..., rot:], k[..., rot:] = 0, 0
    return q, k


def _in_place_rotary(positions, query, key, cos_sin_cache, is_neox):
    q, k = reference.rotary_embedding(positions, query, key, cos_sin_cache, is_neox)
    query.zero_()
    return q, k


def _swapped_silu(x):
    return reference.silu_and_mul(torch.cat(x.chunk(2, dim=-1)[::-1], dim=-1))


def _erf_only_gelu(x, approximate="none"):
    return reference.gelu_and_mul(x, "none")


def _rms_layer_norm(x, weight, bias, eps):
    return reference.rms_norm(x, weight, eps) + (0 if bias is None else bias)


def _biasless_layer_norm(x, weight, bias, eps):
    return reference.layer_norm(x, weight, None, eps)


def _erf_only_plain_gelu(x, approximate="none"):
    return reference.gelu(x, "none")


def _causal_encoder_attention(query, key, value, query_start_loc, scale):
    out = torch.zeros_like(query)
    bounds = query_start_loc.tolist()
    for start, end in zip(bounds, bounds[1:]):
        q, k, v = (t[start:end].float().transpose(0, 1) for t in (query, key, value))
        k, v = (t.repeat_interleave(q.shape[0] // t.shape[0], dim=0) for t in (k, v))
        out[start:end] = F.scaled_dot_product_attention(
            q, k, v, is_causal=True, scale=scale).transpose(0, 1).to(query.dtype)
    return out


def _one_sequence_encoder_attention(query, key, value, query_start_loc, scale):
    """Attends across the sequences of the step, as if they were one."""
    end = torch.tensor([0, int(query_start_loc[-1])], dtype=query_start_loc.dtype)
    return reference.encoder_attention(query, key, value, end, scale)


def _raises(x):
    raise NotImplementedError("kernel not written yet")


# (op, broken impl, dtype, which case labels may fail (None: any), the problem reported)
MUTANTS: list[tuple[str, Callable[..., Any], torch.dtype, str | None, str]] = [
    ("linear", _ignores_bias, torch.float32, "bias", "elements beyond"),
    ("linear", _flattens_leading_dims, torch.bfloat16, "x[2, 3,", "shape"),
    ("linear", _float_linear, torch.float16, None, "dtype float32 != expected"),
    ("rms_norm", _no_eps_rms_norm, torch.float32, "*0.001", "elements beyond"),
    ("rms_norm", _unweighted_rms_norm, torch.bfloat16, None, "elements beyond"),
    ("fused_add_rms_norm", _wrong_residual, torch.float16, None, "output[1]"),
    ("rotary_embedding", _always_neox, torch.float32, "gptj", "elements beyond"),
    ("rotary_embedding", _zeroes_unrotated_dims, torch.bfloat16, "rot_dim=", "elements beyond"),
    ("rotary_embedding", _in_place_rotary, torch.float32, None, "modified its input 'query'"),
    ("silu_and_mul", _swapped_silu, torch.bfloat16, None, "elements beyond"),
    ("gelu_and_mul", _erf_only_gelu, torch.float32, "approximate=tanh", "elements beyond"),
    ("silu_and_mul", _raises, torch.float32, None, "raised NotImplementedError"),
    ("layer_norm", _rms_layer_norm, torch.float32, None, "elements beyond"),
    ("layer_norm", _biasless_layer_norm, torch.bfloat16, "bias", "elements beyond"),
    ("gelu", _erf_only_plain_gelu, torch.float32, "approximate=tanh", "elements beyond"),
    ("encoder_attention", _causal_encoder_attention, torch.float32, None, "elements beyond"),
    ("encoder_attention", _one_sequence_encoder_attention, torch.float16, ",",
     "elements beyond"),
]


def _exercised(op: str, dtype: torch.dtype, marker: str | None) -> set[str]:
    labels = {c.label for c in op_cases(op, dtype)}
    return labels if marker is None else {lab for lab in labels if _marks(lab, marker)}


def _marks(label: str, marker: str) -> bool:
    if marker == "rot_dim=":  # partial rotary only
        dims = dict(part.split("=") for part in label.split() if part[:2] in ("D=", "ro"))
        return dims["D"] != dims["rot_dim"]
    return marker in label


@pytest.mark.parametrize(("op", "impl", "dtype", "marker", "problem"), MUTANTS,
                         ids=[f"{m[0]}-{m[1].__name__}" for m in MUTANTS])
def test_broken_impl_fails_exactly_where_expected(
    op: str, impl: Callable[..., Any], dtype: torch.dtype, marker: str | None, problem: str
) -> None:
    report = check_op(op, impl, dtype)
    failed = {f.split(": ", 1)[0] for f in report.failures}
    assert failed, "the broken implementation passed every case"
    assert failed <= _exercised(op, dtype, marker)  # no false alarms on the other cases
    assert all(problem in f for f in report.failures)
    with pytest.raises(AssertionError, match=f"{op} in .* cases do not match the reference"):
        report.raise_for_failures()


@pytest.mark.parametrize("op", [op for op in OPS if op not in COLLECTIVE_OPS])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_reference_passes_every_case(op: str, dtype: torch.dtype) -> None:
    report = check_op(op, OPS[op].reference, dtype, seed=3)
    report.raise_for_failures()
    assert len(report.checked) == len(op_cases(op, dtype)) >= 4


def test_torch_silu_is_within_float32_tolerance() -> None:
    def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
        d = x.shape[-1] // 2
        return F.silu(x[..., :d]) * x[..., d:]

    check_op("silu_and_mul", silu_and_mul, torch.float32).raise_for_failures()


def test_declined_cases_are_skipped_with_reason() -> None:
    provider = KernelProvider("gelu_and_mul", "erf_only", reference.gelu_and_mul,
                              supports=lambda **s: s["approximate"] == "none")
    report = check_kernel_provider(provider, torch.float32, plugin="test")
    assert report.subject.startswith("gelu_and_mul by test/erf_only in float32")
    assert report.ok and report.checked
    assert len(report.skipped) == len(report.checked) >= 2
    assert all("approximate=tanh" in s and "does not support" in s for s in report.skipped)


def test_unavailable_provider_skips_everything() -> None:
    provider = KernelProvider("rms_norm", "offline", reference.rms_norm,
                              is_available=lambda: "device lost")
    report = check_kernel_provider(provider, torch.float32)
    assert not report.checked and not report.failures
    assert all(s.endswith(": device lost") for s in report.skipped)


def test_inputs_are_reproducible_per_seed() -> None:
    a, b, c = (op_cases("rotary_embedding", torch.float32, seed) for seed in (1, 1, 2))
    assert torch.equal(a[0].args["query"], b[0].args["query"])
    assert not torch.equal(a[0].args["query"], c[0].args["query"])
    assert torch.equal(a[0].args["positions"], b[0].args["positions"])


def test_attention_is_not_an_op() -> None:
    """Attention has one contract, the AttentionBackend (certified by the attention kit)."""
    assert not {"paged_attention", "reshape_and_cache"} & set(OPS)
