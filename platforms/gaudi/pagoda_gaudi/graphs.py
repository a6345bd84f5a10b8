"""HPU graphs: a module wrapped to replay a recorded graph per input shape, and the
core's `GraphCapture` for decode steps. Both import the Gaudi SDK only when used."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from torch import nn

from pagoda_gaudi.sdk import hpu

T = TypeVar("T")


def wrap_in_hpu_graph(module: nn.Module, disable_tensor_cache: bool = True) -> nn.Module:
    """`module` recording an HPU graph on its first call with each input shape and replaying
    it after (habana_frameworks.torch.hpu.wrap_in_hpu_graph); pad inputs to buckets
    (`pagoda_gaudi.bucketing`) to bound the number of graphs."""
    return hpu().wrap_in_hpu_graph(module, disable_tensor_cache=disable_tensor_cache)


class HpuGraphCapture:
    """Records with `HPUGraph.capture_begin/capture_end` on a side stream. HPU graphs own
    their memory: there is no pool to share."""

    def new_pool(self) -> Any:
        return None

    def capture(self, fn: Callable[[], T], pool: Any) -> tuple[Callable[[], None], T]:
        device = hpu()
        device.synchronize()
        graph = device.HPUGraph()
        with device.stream(device.Stream()):
            graph.capture_begin()
            output = fn()
            graph.capture_end()
        device.synchronize()
        return graph.replay, output
