"""`AcceleratorPlatform` answers device, memory and graph queries through the torch device
module of its `device_type`, and `TorchGraphCapture` records through that module's graph
API. No GPU here: the device is an out-of-tree one, registered the way such devices register
with torch (the PrivateUse1 backend renamed, its module registered), in a subprocess since
that registration lasts for the process. ci/gpu.sh runs the same queries on CUDA."""

from __future__ import annotations

import json
from typing import Any

import pytest
from cli_harness import run_python

SCRIPT = """
import contextlib, json, types
import torch
from pagoda.platforms.accelerator import AcceleratorPlatform
from pagoda.platforms.graphs import TorchGraphCapture

events = []
bolt = types.ModuleType("torch_bolt")
bolt.device_count = lambda: 2
bolt.get_device_properties = lambda index: types.SimpleNamespace(
    name=f"Bolt B{index + 1}", total_memory=24 * 2**30, arch=f"bolt{index + 7}")
bolt.mem_get_info = lambda index: (5 * 2**30, 24 * 2**30)
bolt.empty_cache = lambda: events.append("empty_cache")
bolt.synchronize = lambda index=None: events.append("synchronize")

torch.utils.rename_privateuse1_backend("bolt")
torch._register_device_module("bolt", bolt)


class BoltPlatform(AcceleratorPlatform):
    name = "bolt"
    device_type = "bolt"
    supported_dtypes = (torch.float32,)
    distributed_backend = "gloo"
    supports_graph_capture = True
    graph_class = "BoltGraph"

    def device_detail(self, props):
        return props.arch


class PlainBoltPlatform(BoltPlatform):
    def device_detail(self, props):
        return None


out = {"count": BoltPlatform().device_count(),
       "names": [BoltPlatform().device_name(1), PlainBoltPlatform().device_name(0)],
       "memory": list(vars(BoltPlatform().memory_info(0)).values()),
       "has_graph_api_before": BoltPlatform().has_graph_api(),
       "events_before_graphs": list(events)}
events.clear()


class BoltGraph:
    def replay(self):
        events.append("replay")


@contextlib.contextmanager
def graph(g, pool=None):
    events.append(["record", type(g).__name__, pool])
    yield
    events.append("recorded")


bolt.BoltGraph, bolt.graph, bolt.graph_pool_handle = BoltGraph, graph, lambda: "pool-1"
capture = BoltPlatform().graph_capture()
pool = capture.new_pool()
replay, output = capture.capture(lambda: events.append("fn") or "output", pool)
replay()
no_graphs = type("NoGraphs", (BoltPlatform,), {"supports_graph_capture": False})
out.update({"capture": type(capture).__name__, "output": output, "events": events,
            "has_graph_api": BoltPlatform().has_graph_api(),
            "without_support": repr(no_graphs().graph_capture()),
            "is_torch_graph_capture": isinstance(capture, TorchGraphCapture)})
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def outcome() -> dict[str, Any]:
    result = run_python(["-c", SCRIPT])
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_devices_through_the_device_module(outcome: dict[str, Any]) -> None:
    assert outcome["count"] == 2
    assert outcome["names"] == ["Bolt B2 (24 GiB, bolt8)", "Bolt B1 (24 GiB)"]


def test_memory_through_the_device_module(outcome: dict[str, Any]) -> None:
    assert outcome["memory"] == [24 * 2**30, 5 * 2**30]
    assert outcome["events_before_graphs"] == ["empty_cache"]


def test_graph_capture_records_through_the_graph_api(outcome: dict[str, Any]) -> None:
    assert outcome["has_graph_api_before"] is False and outcome["has_graph_api"] is True
    assert outcome["capture"] == "TorchGraphCapture" and outcome["is_torch_graph_capture"]
    assert outcome["output"] == "output"
    assert outcome["events"] == ["synchronize", ["record", "BoltGraph", "pool-1"], "fn",
                                 "recorded", "synchronize", "replay"]
    assert outcome["without_support"] == "None"
