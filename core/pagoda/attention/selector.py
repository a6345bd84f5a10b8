"""Choose the attention backend: forced by name, or the platform's preference."""

from __future__ import annotations

from pagoda.attention.backend import AttentionBackend, AttentionConfig
from pagoda.platforms.platform import Platform
from pagoda.plugins.lazy import load_target
from pagoda.plugins.manager import PluginRegistries, get_registries


class AttentionBackendError(ValueError):
    pass


def _load(regs: PluginRegistries, name: str) -> type[AttentionBackend]:
    return load_target(regs.attention_backends.get(name).spec.backend)


def select_attention_backend(
    platform: Platform,
    config: AttentionConfig,
    forced: str | None = None,
    regs: PluginRegistries | None = None,
) -> type[AttentionBackend]:
    """The backend to use; a forced one that cannot serve raises with its reasons."""
    regs = regs or get_registries()
    if forced:
        if forced not in regs.attention_backends:
            known = ", ".join(regs.attention_backends.names())
            raise AttentionBackendError(
                f"Unknown attention backend {forced!r} (registered: {known})"
            )
        entry = regs.attention_backends.get(forced)
        if not entry.runs_on(platform.name):
            raise AttentionBackendError(
                f"Attention backend {forced!r} does not run on platform {platform.name!r} "
                f"(it supports {', '.join(entry.spec.platforms)})"
            )
        backend = _load(regs, forced)
        reasons = backend.validate(config)
        if reasons:
            raise AttentionBackendError(
                f"Attention backend {forced!r} cannot be used: " + "; ".join(reasons)
            )
        return backend

    preferred = [n for n in platform.preferred_attention_backends if n in regs.attention_backends]
    others = [e.spec.name for e in regs.attention_backends.for_platform(platform.name)]
    tried = []
    for name in dict.fromkeys(preferred + others):
        if not regs.attention_backends.get(name).runs_on(platform.name):
            continue
        backend = _load(regs, name)
        reasons = backend.validate(config)
        if not reasons:
            return backend
        tried.append(f"{name}: {'; '.join(reasons)}")
    raise AttentionBackendError(
        f"No attention backend on {platform.name!r} can serve this model: " + " | ".join(tried)
    )
