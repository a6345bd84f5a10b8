"""CUDA graphs through torch.cuda, as the core's `GraphCapture`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import torch

T = TypeVar("T")


class CudaGraphCapture:
    def new_pool(self) -> Any:
        return torch.cuda.graph_pool_handle()

    def capture(self, fn: Callable[[], T], pool: Any) -> tuple[Callable[[], None], T]:
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=pool):
            output = fn()
        torch.cuda.synchronize()
        return graph.replay, output
