"""Device graph capture as a platform provides it, through its torch device module."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
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


GRAPH_API = ("graph", "graph_pool_handle")
"""What a torch device module needs besides its graph class to record graphs."""


def has_graph_api(device_module: ModuleType, graph_class: str) -> bool:
    """Whether `device_module` (the platform's torch device module) can record graphs with
    `graph_class`."""
    return all(hasattr(device_module, name) for name in (graph_class, *GRAPH_API))


class TorchGraphCapture:
    """Graphs through a torch device module's graph API: `graph_class` (the platform's
    `Platform.graph_class`, a class of that module) recorded under
    `device_module.graph(graph, pool=pool)`."""

    def __init__(self, device_module: ModuleType, graph_class: str) -> None:
        self.device_module = device_module
        self.graph_class = getattr(device_module, graph_class)

    def new_pool(self) -> Any:
        return self.device_module.graph_pool_handle()

    def capture(self, fn: Callable[[], T], pool: Any) -> tuple[Callable[[], None], T]:
        self.device_module.synchronize()
        graph = self.graph_class()
        with self.device_module.graph(graph, pool=pool):
            output = fn()
        self.device_module.synchronize()
        return graph.replay, output
