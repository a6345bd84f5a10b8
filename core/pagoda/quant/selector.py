"""Resolve the user's `quantization` setting to a QuantMethod the platform can run."""

from __future__ import annotations

from typing import Any

from pagoda.platforms.platform import Platform
from pagoda.plugins.lazy import load_target
from pagoda.plugins.manager import PluginRegistries, get_registries
from pagoda.quant.method import QuantMethod


class QuantMethodError(ValueError):
    pass


def supported_quant_methods(platform: Platform, regs: PluginRegistries) -> list[str]:
    """Methods the platform declares and some plugin registers for it."""
    return [
        name for name in platform.supported_quant_methods
        if any(e.runs_on(platform.name) for e in regs.quant_methods.candidates(name))
    ]


def select_quant_method(
    platform: Platform,
    name: str | None,
    hf_config: Any = None,
    regs: PluginRegistries | None = None,
) -> QuantMethod:
    """The method called `name` (None: "none"), built from the checkpoint's config."""
    regs = regs or get_registries()
    name = name or "none"
    if name not in regs.quant_methods:
        known = ", ".join(regs.quant_methods.names())
        raise QuantMethodError(f"Unknown quantization method {name!r} (registered: {known})")
    supported = supported_quant_methods(platform, regs)
    if name not in supported:
        raise QuantMethodError(
            f"Quantization method {name!r} is not supported on platform {platform.name!r} "
            f"(supported there: {', '.join(supported) or 'nothing'})"
        )
    entry = next(e for e in regs.quant_methods.candidates(name) if e.runs_on(platform.name))
    method_cls: type[QuantMethod] = load_target(entry.spec.method)
    return method_cls.from_config(getattr(hf_config, "quantization_config", None) or {})
