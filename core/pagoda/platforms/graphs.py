"""Device graph capture as a platform provides it (CUDA and HIP graphs, HPU graphs, ...)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar

T = TypeVar("T")


class GraphCapture(Protocol):
    """Records the kernels a function launches once, to replay them with one call.

    A replay reads the same input buffers and writes the same outputs as the capture, so
    callers copy each step's inputs into static tensors first.
    """

    def new_pool(self) -> Any:
        """A memory pool that graphs captured into it share (captured largest first)."""

    def capture(self, fn: Callable[[], T], pool: Any) -> tuple[Callable[[], None], T]:
        """Run `fn` under capture; return the replay function and `fn`'s output tensors."""
