"""Resolve the checkpoint's quantization (its `quantization_config`) and the user's
`quantization` setting to the QuantMethod the model is built with."""

from __future__ import annotations

import logging
from typing import Any

from pagoda.platforms.platform import Platform
from pagoda.plugins.lazy import load_target
from pagoda.plugins.manager import PluginRegistries, get_registries
from pagoda.quant.method import QuantMethod

logger = logging.getLogger(__name__)


class QuantMethodError(ValueError):
    pass


def checkpoint_quantization(hf_config: Any) -> tuple[str | None, dict[str, Any]]:
    """(quant_method, quantization_config) the checkpoint declares, or (None, {})."""
    config = getattr(hf_config, "quantization_config", None)
    if config is None:
        return None, {}
    if not isinstance(config, dict):
        config = config.to_dict()
    method = config.get("quant_method")
    if not method:
        raise QuantMethodError("The checkpoint's quantization_config names no quant_method")
    return str(method).lower().replace("_", "-"), config


def select_quant_method(
    platform: Platform,
    name: str | None,
    hf_config: Any = None,
    regs: PluginRegistries | None = None,
) -> QuantMethod:
    """The method for `name` (None: whatever the checkpoint declares, else "none"), built
    from the checkpoint's quantization config. Asking for another method than the one a
    quantized checkpoint was made with is an error (its tensors only load one way)."""
    regs = regs or get_registries()
    declared, config = checkpoint_quantization(hf_config)
    if declared is not None and name not in (None, declared):
        raise QuantMethodError(
            f"The checkpoint is quantized with {declared!r} (its quantization_config); "
            f"quantization {name!r} cannot load it: leave quantization unset or use "
            f"{declared!r}")
    name = declared or name or "none"
    if name not in regs.quant_methods:
        known = ", ".join(regs.quant_methods.names())
        raise QuantMethodError(f"Unknown quantization method {name!r} (registered: {known})")
    entry = next((e for e in regs.quant_methods.candidates(name) if e.runs_on(platform.name)),
                 None)
    if entry is None:
        where = sorted({p for e in regs.quant_methods.candidates(name) for p in e.spec.platforms})
        raise QuantMethodError(f"Quantization method {name!r} is not available on platform "
                               f"{platform.name!r} (registered for: {', '.join(where)})")
    method_cls: type[QuantMethod] = load_target(entry.spec.method)
    try:
        method = method_cls.from_config(config)
    except ValueError as exc:
        raise QuantMethodError(str(exc)) from None
    if name != "none":
        logger.info("Quantization: %s", method.describe())
    return method
