"""The first-party backends, as data: which distribution provides each, and how each
stands on this machine (usable, installed but unusable and why, or not installed); and
which distribution provides each first-party command that core itself lacks."""

from __future__ import annotations

import os
from dataclasses import dataclass
from importlib import metadata

from pagoda.plugins.api_version import normalize_distribution
from pagoda.plugins.manager import ALLOW_LIST_ENV, PluginRegistries


@dataclass(frozen=True)
class KnownBackend:
    """A backend this project ships as its own distribution."""

    name: str
    distribution: str
    targets: str
    devices: tuple[str, ...]  # the --device names it provides


FIRST_PARTY_BACKENDS: tuple[KnownBackend, ...] = (
    KnownBackend("cpu", "pagoda-cpu", "x86-64 and Arm CPUs", ("cpu",)),
    KnownBackend("cuda", "pagoda-cuda", "NVIDIA GPUs (Triton kernels)", ("cuda",)),
    KnownBackend("rocm", "pagoda-rocm", "AMD GPUs", ("rocm",)),
    KnownBackend("xpu", "pagoda-xpu", "Intel GPUs", ("xpu",)),
    KnownBackend("tpu", "pagoda-tpu", "Google TPUs", ("tpu",)),
    KnownBackend("gaudi", "pagoda-gaudi", "Intel Gaudi accelerators", ("gaudi", "hpu")),
)


FIRST_PARTY_COMMANDS: dict[str, str] = {
    "serve": "pagoda-server",
    "chat": "pagoda-server",
    "complete": "pagoda-server",
    "run-batch": "pagoda-server",
    "bench serve": "pagoda-server",
}
"""`pagoda COMMAND` -> the distribution that adds it."""


def missing_command_message(command: str, regs: PluginRegistries) -> str:
    """Why first-party `command` is not there (its distribution not installed, its plugin
    disabled or broken), and what to do."""
    distribution = FIRST_PARTY_COMMANDS[command]
    dist = normalize_distribution(distribution)
    records = [r for r in regs.plugins if normalize_distribution(r.distribution) == dist]
    for record in records:
        if record.status == "disabled":
            return (f"{command} comes with {distribution}, whose plugin {record.name!r} is "
                    f"disabled by {ALLOW_LIST_ENV}={os.environ.get(ALLOW_LIST_ENV)}; add "
                    f"{record.name} to {ALLOW_LIST_ENV} or unset it")
        if not record.ok:
            return (f"{command} comes with {distribution}, whose plugin {record.name!r} did "
                    f"not load: {record.error}")
    return f"{command} comes with {distribution}: pip install {distribution}"


@dataclass(frozen=True)
class BackendStatus:
    """How one first-party backend stands here."""

    name: str
    distribution: str
    targets: str
    status: str  # "usable", "unusable" or "not installed"
    version: str | None = None
    devices: tuple[str, ...] = ()
    reason: str | None = None  # why unusable, or the command that installs it
    verified_on: str | None = None  # what its plugin says (plugin API 2); None: unknown


def package_for(device: str) -> str:
    """The distribution to install for `--device NAME` (`pagoda-NAME` if not first-party)."""
    for backend in FIRST_PARTY_BACKENDS:
        if device in backend.devices:
            return backend.distribution
    return f"pagoda-{device}"


def _installed_version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def backend_status(backend: KnownBackend, regs: PluginRegistries) -> BackendStatus:
    """Installed? Its plugins loaded? Its probes usable? The first "no" is the reason."""
    known = (backend.name, backend.distribution, backend.targets)
    version = _installed_version(backend.distribution)
    if version is None:
        return BackendStatus(*known, "not installed",
                             reason=f"pip install {backend.distribution}")
    dist = normalize_distribution(backend.distribution)
    records = [r for r in regs.plugins if normalize_distribution(r.distribution) == dist]
    verified = next((r.verified_on for r in records if r.verified_on), None)
    if not records:
        return BackendStatus(*known, "unusable", version,
                             reason=f"{backend.distribution} registers no pagoda.plugins "
                                    "entry point; reinstall it")
    failed = [r for r in records if not r.ok]
    if failed:
        reasons = "; ".join(f"plugin {r.name!r} {r.status}: {r.error}" for r in failed)
        return BackendStatus(*known, "unusable", version, reason=reasons, verified_on=verified)
    mine = {r.name for r in records}
    probes = [e.spec for e in regs.probes if e.plugin in mine]
    usable = [p for p in probes if p.usable]
    if usable:
        devices = tuple(d for p in usable for d in (p.devices or (p.name,)))
        return BackendStatus(*known, "usable", version, devices, verified_on=verified)
    reasons = [(p.name, p.reason or "no reason given") for p in probes]
    reason = "; ".join(why if name == backend.name else f"{name}: {why}"
                       for name, why in reasons) or "it reports no device"
    return BackendStatus(*known, "unusable", version, reason=reason, verified_on=verified)


def first_party_status(regs: PluginRegistries) -> list[BackendStatus]:
    """Every first-party backend, in table order."""
    return [backend_status(b, regs) for b in FIRST_PARTY_BACKENDS]
