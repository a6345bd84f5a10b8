"""XPU graphs through torch.xpu's graph API (torch builds that have it), as the core's
`GraphCapture`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import torch

T = TypeVar("T")


def has_graph_api() -> bool:
    """Whether this torch can record XPU graphs (torch.xpu.XPUGraph, newer torch only)."""
    return all(hasattr(torch.xpu, name) for name in ("XPUGraph", "graph", "graph_pool_handle"))


class XpuGraphCapture:
    def new_pool(self) -> Any:
        return torch.xpu.graph_pool_handle()

    def capture(self, fn: Callable[[], T], pool: Any) -> tuple[Callable[[], None], T]:
        torch.xpu.synchronize()
        graph = torch.xpu.XPUGraph()
        with torch.xpu.graph(graph, pool=pool):
            output = fn()
        torch.xpu.synchronize()
        return graph.replay, output
