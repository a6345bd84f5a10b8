"""Which core ops the shared Triton kernels implement, as kernel providers a platform
registers. Imports neither torch nor Triton: plugin entry points use it at discovery."""

from __future__ import annotations

from dataclasses import dataclass

from pagoda.plugins import KernelProvider
from pagoda.plugins.lazy import Target

TRITON_OPS = ("linear", "rms_norm", "fused_add_rms_norm", "fused_add_rms_norm_quant",
              "rotary_embedding", "silu_and_mul", "silu_and_mul_quant", "gelu_and_mul",
              "sample_from_logits", "apply_token_bitmask", "fused_moe", "lora_shrink",
              "lora_expand")
"""Core ops with a kernel in `pagoda.kernels.triton`."""


@dataclass(frozen=True)
class TritonAvailability:
    """`KernelProvider.is_available` of the shared Triton kernels on one platform: None when
    Triton is installed, the platform's own check passes and torch sees a device, else the
    first reason why not (checked once per process, see `pagoda.kernels.triton_support`)."""

    device_type: str
    """The torch device module that must see a device ("cuda", "xpu", ...)."""

    install_triton: str
    """How to get Triton here, for "triton is not installed: ..."."""

    no_device: str
    """The reason when torch sees no device (e.g. "no CUDA device is visible to torch")."""

    platform_check: Target | None = None
    """The platform's own condition, a function returning a reason or None (e.g. a HIP
    build of torch), checked after Triton is found and before the device."""

    def __call__(self) -> str | None:
        from pagoda.kernels.triton_support import triton_unavailable_reason

        return triton_unavailable_reason(self)


def _target(module: str, name: str) -> str:
    """"module:name", or "module:object.name" where `module` names an object holding it."""
    return f"{module}.{name}" if ":" in module else f"{module}:{name}"


def triton_kernel_providers(platform: str, availability: TritonAvailability, *,
                            module: str = "pagoda.kernels.triton",
                            priority: int = 10) -> list[KernelProvider]:
    """One "triton" provider per op in TRITON_OPS for `platform`, available as `availability`
    says and supporting what `pagoda.kernels.triton_support.supports` accepts; `module`
    holds the functions, or names an object that does (e.g. a platform's
    `pagoda.kernels.triton.launched.LaunchedKernels`, "pkg.mod:KERNELS")."""
    return [
        KernelProvider(op, "triton", _target(module, op), (platform,), priority=priority,
                       is_available=availability,
                       supports="pagoda.kernels.triton_support:supports")
        for op in TRITON_OPS
    ]


TRITON_QUANT_OPS = ("fp8_linear", "int8_linear", "woq_linear")
"""Quantized linears with kernels in `pagoda.kernels.triton.quant_linear`."""

_QUANT_PARTS = {"fp8_linear": "fp8", "int8_linear": "int8", "woq_linear": "woq"}


def triton_quant_providers(platform: str, availability: TritonAvailability, *,
                           ops: tuple[str, ...] = TRITON_QUANT_OPS,
                           module: str = "pagoda.kernels.triton.quant_linear",
                           impls: str | None = None,
                           priority: int = 10) -> list[KernelProvider]:
    """One "triton" provider per quantized linear in `ops` for `platform`: the impl (named
    as the op) from `impls` (default `module`; e.g. a platform's wrappers that pass its
    launch parameters), `module`'s `prepare_<kind>` and `supports_<kind>` (kind fp8, int8,
    woq), and for fp8 and int8 `module`'s `quantized_input` (they take x quantized per token
    from the norm or activation before them where they would quantize it themselves).
    The fp8 kernels use NVIDIA's float8 e4m3 (and torch._scaled_mm on CUDA): a platform
    whose float8 is another format leaves fp8_linear out of `ops`."""
    return [
        KernelProvider(op, "triton", _target(impls or module, op), (platform,),
                       priority=priority,
                       is_available=availability,
                       supports=f"{module}:supports_{_QUANT_PARTS[op]}",
                       prepare=f"{module}:prepare_{_QUANT_PARTS[op]}",
                       quantized_input=None if op == "woq_linear" else f"{module}:quantized_input")
        for op in ops
    ]
