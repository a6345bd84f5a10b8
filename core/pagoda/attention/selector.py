"""Choose the attention backend: forced by name, or the platform's preference."""

from __future__ import annotations

from typing import Any

from pagoda.attention.backend import AttentionBackend, AttentionConfig
from pagoda.platforms.platform import Platform
from pagoda.plugins.lazy import load_target
from pagoda.plugins.manager import PluginRegistries, get_registries
from pagoda.plugins.registry import Registered


class AttentionBackendError(ValueError):
    pass


def _entry_for(regs: PluginRegistries, name: str, platform: str) -> Registered[Any] | None:
    """The highest-priority registration of `name` that runs on `platform` (several
    plugins may register one name, e.g. a Triton backend for CUDA and for ROCm)."""
    return next((e for e in regs.attention_backends.candidates(name) if e.runs_on(platform)),
                None)


def _able_backends(platform: Platform, config: AttentionConfig, regs: PluginRegistries,
                   exclude: str) -> list[str]:
    """Names of the backends on `platform`, other than `exclude`, that can serve `config`."""
    able = []
    for entry in regs.attention_backends.for_platform(platform.name):
        if entry.spec.name == exclude or entry.spec.name in able:
            continue
        try:
            if not load_target(entry.spec.backend).validate(config):
                able.append(entry.spec.name)
        except Exception:  # a broken plugin's backend is no alternative  # noqa: BLE001
            continue
    return able


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
        entry = _entry_for(regs, forced, platform.name)
        if entry is None:
            where = sorted({p for e in regs.attention_backends.candidates(forced)
                            for p in e.spec.platforms})
            raise AttentionBackendError(
                f"Attention backend {forced!r} does not run on platform {platform.name!r} "
                f"(it supports {', '.join(where)})"
            )
        backend = load_target(entry.spec.backend)
        reasons = backend.validate(config)
        if reasons:
            able = _able_backends(platform, config, regs, exclude=forced)
            instead = (f"backends on {platform.name!r} that can: {', '.join(able)}" if able
                       else f"no other backend on {platform.name!r} can")
            raise AttentionBackendError(
                f"Attention backend {forced!r} cannot be used: " + "; ".join(reasons)
                + f" ({instead})"
            )
        return backend

    preferred = [n for n in platform.preferred_attention_backends if n in regs.attention_backends]
    others = [e.spec.name for e in regs.attention_backends.for_platform(platform.name)]
    tried = []
    for name in dict.fromkeys(preferred + others):
        entry = _entry_for(regs, name, platform.name)
        if entry is None:
            continue
        backend = load_target(entry.spec.backend)
        reasons = backend.validate(config)
        if not reasons:
            return backend
        tried.append(f"{name}: {'; '.join(reasons)}")
    raise AttentionBackendError(
        f"No attention backend on {platform.name!r} can serve this model: " + " | ".join(tried)
    )
