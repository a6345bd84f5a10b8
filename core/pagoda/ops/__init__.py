"""Core ops: declarations with references, provider resolution, the active op table."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from pagoda.ops.registry import OPS, OpResolutionError, OpSpec, OpTable, resolve_op

_current: OpTable | None = None


def current_ops() -> OpTable:
    """The op table models are being built with (the references when none is set)."""
    return _current if _current is not None else OpTable.reference()


@contextlib.contextmanager
def use_ops(table: OpTable) -> Iterator[OpTable]:
    """Build models with `table`: layers bind its callables at construction."""
    global _current
    previous, _current = _current, table
    try:
        yield table
    finally:
        _current = previous


__all__ = ["OPS", "OpResolutionError", "OpSpec", "OpTable", "current_ops", "resolve_op", "use_ops"]
