"""A platform plugin declared as data: one object whose methods implement the hooks.

An entry point may name an object instead of a module (`cuda = "pagoda_cuda.plugin:plugin"`);
pluggy registers its hook methods. `PlatformPlugin` answers the hooks a platform needs from
what its constructor is given, naming heavy code lazily ("module:attribute"), so the
entry-point module stays tiny. A plugin that needs more subclasses it and adds (or
overrides) methods marked with `hookimpl`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from pagoda.plugins.hookspecs import hookimpl
from pagoda.plugins.lazy import Target, load_target
from pagoda.plugins.specs import (
    AttentionBackendSpec,
    KernelProvider,
    PlatformProbe,
    PluginInfo,
    QuantMethodSpec,
)


class PlatformPlugin:
    """The plugin of one platform, also called `name`.

    `probe` names a function returning the platform's `PlatformProbe` (cheap: no vendor SDK);
    `platform` names the `Platform` class, imported and built only when this platform is
    chosen, after setting each of `env_defaults` that is unset (e.g. to point a runtime at
    the device the probe found). The spec lists are registered as they are.
    """

    def __init__(
        self,
        name: str,
        version: str,
        *,
        api_version: int,
        package: str,
        verified_on: str,
        description: str,
        probe: Target,
        platform: Target,
        attention_backends: Sequence[AttentionBackendSpec] = (),
        kernel_providers: Sequence[KernelProvider] = (),
        quant_methods: Sequence[QuantMethodSpec] = (),
        env_defaults: Mapping[str, str] | None = None,
    ) -> None:
        self.info = PluginInfo(name, version, api_version, description, package=package,
                               verified_on=verified_on)
        self.probe = probe
        self.platform = platform
        self.attention_backends = tuple(attention_backends)
        self.kernel_providers = tuple(kernel_providers)
        self.quant_methods = tuple(quant_methods)
        self.env_defaults = dict(env_defaults or {})

    @property
    def name(self) -> str:
        return self.info.name

    def __repr__(self) -> str:
        return f"PlatformPlugin({self.name!r}, package={self.info.package!r})"

    @hookimpl
    def pagoda_plugin_info(self) -> PluginInfo:
        return self.info

    @hookimpl
    def pagoda_platform_probe(self) -> list[PlatformProbe]:
        return [load_target(self.probe)()]

    @hookimpl
    def pagoda_platform_factory(self, name: str) -> Any:
        if name != self.name:
            return None
        for variable, value in self.env_defaults.items():
            os.environ.setdefault(variable, value)
        return load_target(self.platform)()

    @hookimpl
    def pagoda_attention_backends(self) -> list[AttentionBackendSpec]:
        return list(self.attention_backends)

    @hookimpl
    def pagoda_kernel_providers(self) -> list[KernelProvider]:
        return list(self.kernel_providers)

    @hookimpl
    def pagoda_quant_methods(self) -> list[QuantMethodSpec]:
        return list(self.quant_methods)
