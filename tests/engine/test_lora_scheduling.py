"""The scheduler and the KV cache with LoRA adapters: a step holds at most max_loras
distinct adapters (the base model is not one), waiting requests are admitted first come,
first served, and prefix-cache blocks are never shared between adapters or with the base
model."""

from __future__ import annotations

from pagoda.config import SchedulerConfig
from pagoda.engine.kv_cache_manager import KVCacheManager
from pagoda.engine.scheduler import Scheduler
from pagoda.engine.scheduler_output import ModelRunnerOutput
from pagoda.lora import LoRARequest
from tests.engine.helpers import make_request

BS = 4
ADAPTERS = [LoRARequest(f"a{i}", i, f"/adapters/{i}") for i in (1, 2, 3)]


def _request(request_id: str, lora: LoRARequest | None, prompt=(1, 2, 3, 4, 5, 6)):
    request = make_request(request_id, list(prompt), max_tokens=3)
    request.lora_request = lora
    return request


def _step(sched: Scheduler) -> set[int]:
    """One step, every sampled request given token 7; the adapter ids it held."""
    out = sched.schedule()
    ids = {sched.requests[s.request_id].lora_id for s in out.scheduled} - {0}
    sched.update_from_output(out, ModelRunnerOutput(
        sampled={s.request_id: 7 for s in out.scheduled if s.sample}))
    return ids


def test_a_step_holds_at_most_max_loras_adapters_first_come_first_served():
    sched = Scheduler(SchedulerConfig(16, 256), KVCacheManager(64, BS), max_model_len=64,
                      max_loras=2)
    order = [ADAPTERS[0], None, ADAPTERS[1], ADAPTERS[2], ADAPTERS[0], None]
    for i, lora in enumerate(order):
        sched.add_request(_request(str(i), lora))
    first = sched.schedule()
    # a1, the base model, a2; a3 waits, and so does everything behind it.
    assert [s.request_id for s in first.scheduled] == ["0", "1", "2"]
    sched.update_from_output(first, ModelRunnerOutput(
        sampled={s.request_id: 7 for s in first.scheduled}))
    held = [_step(sched) for _ in range(8)]
    assert all(len(ids) <= 2 for ids in held)
    assert not sched.has_unfinished_requests()
    assert any(3 in ids for ids in held)


def test_prefix_blocks_are_keyed_by_adapter():
    kv = KVCacheManager(64, BS)
    prompt = list(range(1, 14))  # three full blocks, and one token to compute
    owner = _request("owner", ADAPTERS[0], prompt)
    assert kv.allocate_slots(owner, len(prompt))
    for lora, hits in ((ADAPTERS[0], 3), (ADAPTERS[1], 0), (None, 0)):
        assert len(kv.find_computed_blocks(_request(f"r{lora}", lora, prompt))) == hits
