"""Op providers resolve once per platform: highest priority that runs there, is available
and supports the static arguments; the reference everywhere else."""

from __future__ import annotations

import pluggy
import pytest
import torch

from pagoda.ops import OPS, OpResolutionError, OpTable, current_ops, resolve_op, use_ops
from pagoda.plugins import KernelProvider, PluginRegistries, get_registries
from pagoda_cpu.plugin import CPU_CSRC_OPS, CPU_OPS
from pagoda_template.plugin import OPS as TEMPLATE_OPS

CPU_RESOLVED = {op: "cpu/cpu_native" for op in CPU_OPS} | {
    op: "cpu/cpu_csrc" for op in CPU_CSRC_OPS}
"""Where pagoda-cpu's native kernels are built (the tests' machines: test_cpu_platform.py)."""


@pytest.mark.parametrize(
    ("platform", "resolved"),
    [("cpu", CPU_RESOLVED), ("template", {op: "template/template" for op in TEMPLATE_OPS}),
     ("cuda", {})],  # no GPU here: Triton's providers are unavailable
)
def test_every_op_resolves_to_the_platform_provider(
    platform: str, resolved: dict[str, str]
) -> None:
    table = OpTable(platform, dtype=torch.float32)
    required = {op: name for op, name in table.providers.items() if not OPS[op].optional}
    assert required == {op: resolved.get(op, "core/reference")
                        for op, spec in OPS.items() if not spec.optional}
    assert set(table.providers) | set(table.missing) == set(OPS)
    assert not set(table.providers) & set(table.missing)
    assert table.platform == platform


def test_table_calls_are_plain_functions() -> None:
    from pagoda_cpu import ops as cpu_ops

    table = OpTable("cpu")
    assert table.gelu_and_mul is cpu_ops.gelu_and_mul
    with pytest.raises(AttributeError):
        table.no_such_op  # noqa: B018


def test_cpu_offers_every_quantized_linear_with_its_prepare() -> None:
    from pagoda.plugins.specs import QUANT_INPUT_OPS, QUANT_OPS
    from pagoda_cpu import csrc_ops, quant_ops

    table = OpTable("cpu", dtype=torch.bfloat16)
    # Its linears quantize their inputs themselves: nothing hands them quantized inputs.
    assert set(table.missing) == set(QUANT_INPUT_OPS)
    assert all(table.get(op) is None for op in QUANT_INPUT_OPS)
    for op in QUANT_OPS:
        module = csrc_ops if op in CPU_CSRC_OPS else quant_ops
        assert table.providers[op] == CPU_RESOLVED[op]
        assert getattr(table, op) is getattr(module, op)
        assert table.prepare[op] is getattr(module, f"prepare_{op.split('_')[0]}")
        assert not table.quantized_input[op](None, 64)


def _registries(*providers: KernelProvider) -> PluginRegistries:
    regs = PluginRegistries(manager=pluggy.PluginManager("pagoda"))
    for provider in providers:
        regs.kernels.add(provider, "test")
    return regs


def test_supports_and_availability_decide() -> None:
    fp16_only = KernelProvider("rms_norm", "fp16", "pagoda.ops.reference:rms_norm",
                               ("npu",), priority=20,
                               supports=lambda dtype, **_: dtype == torch.float16)
    broken = KernelProvider("rms_norm", "broken", "pagoda.ops.reference:rms_norm", ("npu",),
                            priority=30, is_available=lambda: "driver missing")
    generic = KernelProvider("rms_norm", "generic", "pagoda.ops.reference:rms_norm", ("npu",))
    regs = _registries(generic, fp16_only, broken)
    assert resolve_op("rms_norm", "npu", regs, dtype=torch.float16).spec.name == "fp16"
    assert resolve_op("rms_norm", "npu", regs, dtype=torch.bfloat16).spec.name == "generic"
    with pytest.raises(OpResolutionError) as err:
        resolve_op("rms_norm", "npu", _registries(broken, fp16_only), dtype=torch.float32)
    assert "test/broken: driver missing" in str(err.value)
    assert "test/fp16: does not support" in str(err.value)


def test_unknown_op() -> None:
    with pytest.raises(OpResolutionError, match="Unknown op 'softmax' .*rms_norm"):
        resolve_op("softmax", "cpu", get_registries())


def test_use_ops_sets_and_restores_the_current_table() -> None:
    assert current_ops().providers["rms_norm"] == "core/reference"
    table = OpTable("template")
    with use_ops(table):
        assert current_ops() is table
    assert current_ops().providers["rms_norm"] == "core/reference"


def test_reference_ops_env_overrides_the_platform_provider(monkeypatch) -> None:
    from pagoda.ops import reference

    monkeypatch.setenv("PAGODA_REFERENCE_OPS", "rms_norm, silu_and_mul")
    table = OpTable("cpu")
    assert table.rms_norm is reference.rms_norm
    assert table.silu_and_mul is reference.silu_and_mul
    assert table.providers["rms_norm"].startswith("core/reference")
    assert table.providers["fused_add_rms_norm"] == CPU_RESOLVED.get("fused_add_rms_norm",
                                                                     "core/reference")


def test_excluded_providers_pass_to_the_next_in_line(monkeypatch) -> None:
    """`op/name` passes over one op's provider, `name` over all of that provider's."""
    monkeypatch.setenv("PAGODA_EXCLUDED_PROVIDERS", "rms_norm/cpu_csrc")
    table = OpTable("cpu")
    assert table.providers["rms_norm"] == "cpu/cpu_native"
    assert table.providers["fused_add_rms_norm"] == CPU_RESOLVED["fused_add_rms_norm"]
    monkeypatch.setenv("PAGODA_EXCLUDED_PROVIDERS", " cpu_csrc ,cpu_native")
    table = OpTable("cpu", dtype=torch.float32)
    assert {op: p for op, p in table.providers.items() if not OPS[op].optional} == {
        op: "core/reference" for op, spec in OPS.items() if not spec.optional}
    with pytest.raises(OpResolutionError, match="cpu_native: ruled out by PAGODA_EXCLUDED"):
        resolve_op("int8_linear", "cpu")


def test_reference_ops_env_names_unknown_ops(monkeypatch) -> None:
    monkeypatch.setenv("PAGODA_REFERENCE_OPS", "rms_norm,no_such_op")
    with pytest.raises(OpResolutionError, match="no_such_op"):
        OpTable("cpu")
