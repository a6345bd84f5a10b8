"""Open, typed registries keyed by name, filled from plugin hooks at setup."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from pagoda.plugins.specs import ANY_PLATFORM

T = TypeVar("T")


@dataclass(frozen=True)
class Registered(Generic[T]):
    """A spec and the plugin that registered it."""

    spec: T
    plugin: str

    @property
    def priority(self) -> int:
        return getattr(self.spec, "priority", 0)

    def runs_on(self, platform: str) -> bool:
        platforms = getattr(self.spec, "platforms", (ANY_PLATFORM,))
        return ANY_PLATFORM in platforms or platform in platforms


@dataclass
class Registry(Generic[T]):
    """Specs of one kind, grouped by key and ordered by priority (highest first)."""

    kind: str
    key: Callable[[T], str]
    _entries: dict[str, list[Registered[T]]] = field(default_factory=dict)

    def add(self, spec: T, plugin: str) -> None:
        entries = self._entries.setdefault(self.key(spec), [])
        entries.append(Registered(spec, plugin))
        entries.sort(key=lambda e: -e.priority)

    def __contains__(self, name: str) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[Registered[T]]:
        for entries in self._entries.values():
            yield from entries

    def names(self) -> list[str]:
        return sorted(self._entries)

    def candidates(self, name: str) -> list[Registered[T]]:
        """Every entry registered under `name`, highest priority first."""
        return list(self._entries.get(name, ()))

    def get(self, name: str) -> Registered[T]:
        """The highest-priority entry under `name`."""
        entries = self._entries.get(name)
        if not entries:
            known = ", ".join(self.names()) or "none"
            raise KeyError(f"No {self.kind} named {name!r} is registered (known: {known})")
        return entries[0]

    def for_platform(self, platform: str) -> list[Registered[T]]:
        """Entries usable on `platform`, highest priority first."""
        return sorted((e for e in self if e.runs_on(platform)), key=lambda e: -e.priority)
