"""Op declarations and provider resolution.

Core declares each op with its reference; platforms register `KernelProvider`s through the
`pagoda_kernel_providers` hook. Resolution picks, once at setup, the highest-priority
provider that runs on the platform, is available and supports the static arguments, and
returns a plain callable: nothing on the per-token path goes through the registry.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pagoda.ops import reference
from pagoda.plugins.lazy import load_target
from pagoda.plugins.manager import PluginRegistries, get_registries
from pagoda.plugins.registry import Registered
from pagoda.plugins.specs import CORE_OPS, OPTIONAL_OPS, KernelProvider

REFERENCE_PROVIDER = "reference"


@dataclass(frozen=True)
class OpSpec:
    """An op of the core: its name and the reference implementation that defines it.
    `optional`: a platform need not offer it (`OPTIONAL_OPS`: the quantized linears and
    the ops that quantize their inputs)."""

    name: str
    reference: Callable[..., Any]
    optional: bool = False


OPS: dict[str, OpSpec] = {name: OpSpec(name, getattr(reference, name), name in OPTIONAL_OPS)
                          for name in CORE_OPS}


def _identity(weight: Any, dtype: Any = None) -> Any:
    return weight


def _never(weight: Any, rows: int) -> bool:
    """`quantized_input` of a provider without one: x always in the model's dtype."""
    return False


class OpResolutionError(RuntimeError):
    pass


def unusable_reason(provider: KernelProvider, **static_args: Any) -> str | None:
    """Why `provider` cannot serve here with these static arguments, or None."""
    if provider.name in (ruled_out := excluded_providers()) or \
            f"{provider.op}/{provider.name}" in ruled_out:
        return f"ruled out by {EXCLUDED_PROVIDERS_ENV}"
    if provider.is_available is not None:
        reason = load_target(provider.is_available)()
        if reason:
            return reason
    if provider.supports is not None and not load_target(provider.supports)(**static_args):
        return f"does not support {static_args}"
    return None


def providers_for(
    op: str, platform: str, regs: PluginRegistries | None = None
) -> list[Registered[KernelProvider]]:
    """Providers of `op` that run on `platform`, highest priority first."""
    if op not in OPS:
        raise OpResolutionError(f"Unknown op {op!r} (known: {', '.join(sorted(OPS))})")
    regs = regs or get_registries()
    return [e for e in regs.kernels.candidates(op) if e.runs_on(platform)]


def resolve_op(
    op: str, platform: str, regs: PluginRegistries | None = None, **static_args: Any
) -> Registered[KernelProvider]:
    """The provider `op` resolves to on `platform` for these static arguments."""
    reasons = []
    for entry in providers_for(op, platform, regs):
        reason = unusable_reason(entry.spec, **static_args)
        if reason is None:
            return entry
        reasons.append(f"{entry.plugin}/{entry.spec.name}: {reason}")
    if not reasons:
        raise OpResolutionError(f"no provider of op {op!r} is registered for {platform!r}")
    raise OpResolutionError(f"No usable provider of op {op!r} on {platform!r}: {reasons}")


REFERENCE_OPS_ENV = "PAGODA_REFERENCE_OPS"
"""Comma-separated ops to run with core's reference whatever the platform provides (to
compare a kernel with the reference end to end, or to rule a kernel out)."""


EXCLUDED_PROVIDERS_ENV = "PAGODA_EXCLUDED_PROVIDERS"
"""Comma-separated providers to pass over, each `name` (for every op) or `op/name`: the
next provider in line serves instead (to measure a kernel against it end to end)."""


def excluded_providers() -> set[str]:
    return {n.strip() for n in os.environ.get(EXCLUDED_PROVIDERS_ENV, "").split(",")
            if n.strip()}


def reference_ops_requested() -> set[str]:
    names = {n.strip() for n in os.environ.get(REFERENCE_OPS_ENV, "").split(",") if n.strip()}
    unknown = names - set(OPS)
    if unknown:
        raise OpResolutionError(f"{REFERENCE_OPS_ENV} names unknown ops {sorted(unknown)} "
                                f"(known: {', '.join(sorted(OPS))})")
    return names


class OpTable:
    """Every op resolved for one platform: `table.rms_norm(x, w, eps)` is a plain call.

    An optional op (a quantized linear) the platform does not offer is left out: `missing`
    says why, and `require(op, purpose)` turns that into an error naming who offers it.
    `prepare[op]` is the chosen provider's weight preparation (the identity if it has none),
    `quantized_input[op]` its `KernelProvider.quantized_input` (never, if it has none).
    """

    def __init__(self, platform: str, regs: PluginRegistries | None = None, **static_args: Any):
        self.platform = platform
        self.providers: dict[str, str] = {}
        self.prepare: dict[str, Callable[..., Any]] = {}
        self.quantized_input: dict[str, Callable[[Any, int], bool]] = {}
        self.missing: dict[str, str] = {}
        forced = reference_ops_requested()
        for op in OPS:
            if op in forced:
                self._set(op, OPS[op].reference, _identity, _never,
                          f"core/{REFERENCE_PROVIDER} ({REFERENCE_OPS_ENV})")
                continue
            try:
                entry = resolve_op(op, platform, regs, **static_args)
            except OpResolutionError as exc:
                if not OPS[op].optional:
                    raise
                self.missing[op] = str(exc)
                continue
            spec = entry.spec
            self._set(op, load_target(spec.impl),
                      load_target(spec.prepare) if spec.prepare else _identity,
                      load_target(spec.quantized_input) if spec.quantized_input else _never,
                      f"{entry.plugin}/{spec.name}")

    def _set(self, op: str, impl: Callable[..., Any], prepare: Callable[..., Any],
             quantized_input: Callable[[Any, int], bool], provider: str) -> None:
        setattr(self, op, impl)
        self.prepare[op] = prepare
        self.quantized_input[op] = quantized_input
        self.providers[op] = provider

    def get(self, op: str) -> Callable[..., Any] | None:
        """`op`'s implementation, or None where the platform does not offer it (optional)."""
        return None if op in self.missing else getattr(self, op)

    def require(self, op: str, purpose: str, regs: PluginRegistries | None = None) -> None:
        """Raise OpResolutionError unless `op` resolved: `purpose` says what needs it, and
        the message names the platforms that register a provider of it."""
        if op not in self.missing:
            return
        regs = regs or get_registries()
        offered = sorted({p for e in regs.kernels.candidates(op) for p in e.spec.platforms})
        raise OpResolutionError(
            f"{purpose} needs op {op!r}, which platform {self.platform!r} does not offer "
            f"({self.missing[op]}); platforms that offer it: {', '.join(offered) or 'none'}")

    @classmethod
    def reference(cls) -> OpTable:
        """A table of the reference implementations (any device)."""
        table = cls.__new__(cls)
        table.platform = "*"
        table.providers, table.prepare, table.quantized_input, table.missing = {}, {}, {}, {}
        for name, spec in OPS.items():
            table._set(name, spec.reference, _identity, _never, f"core/{REFERENCE_PROVIDER}")
        return table
