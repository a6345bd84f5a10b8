"""What a platform has registered: every kernel provider of every op, every attention
backend, as flat lists to parametrize tests over."""

from __future__ import annotations

from dataclasses import dataclass

from pagoda.attention.backend import AttentionBackend
from pagoda.ops.registry import OPS, providers_for
from pagoda.plugins.lazy import load_target
from pagoda.plugins.manager import PluginRegistries, get_registries
from pagoda.plugins.specs import AttentionBackendSpec, KernelProvider


@dataclass(frozen=True)
class ProviderEntry:
    """One provider of one op, and the plugin that registered it."""

    op: str
    plugin: str
    provider: KernelProvider

    @property
    def id(self) -> str:
        return f"{self.op}-{self.plugin}/{self.provider.name}"


@dataclass(frozen=True)
class BackendEntry:
    """One attention backend, and the plugin that registered it."""

    name: str
    plugin: str
    spec: AttentionBackendSpec

    @property
    def id(self) -> str:
        return f"{self.plugin}/{self.name}"

    def load(self) -> type[AttentionBackend]:
        return load_target(self.spec.backend)


def kernel_providers(platform: str, regs: PluginRegistries | None = None) -> list[ProviderEntry]:
    """Every (plugin, provider) registered to run on `platform`, core's references included,
    in op order then priority order. Providers of an op core does not declare come last
    (the check of such a provider fails: nothing would ever call it)."""
    regs = regs or get_registries()
    known = [ProviderEntry(op, e.plugin, e.spec)
             for op in OPS for e in providers_for(op, platform, regs)]
    unknown = [ProviderEntry(e.spec.op, e.plugin, e.spec)
               for e in regs.kernels.for_platform(platform) if e.spec.op not in OPS]
    return known + unknown


def attention_backends(platform: str, regs: PluginRegistries | None = None) -> list[BackendEntry]:
    """Every attention backend that runs on `platform`, highest priority first."""
    regs = regs or get_registries()
    return [BackendEntry(e.spec.name, e.plugin, e.spec)
            for e in regs.attention_backends.for_platform(platform)]
