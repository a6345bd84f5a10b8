"""The engine core: scheduler + KV cache manager + executor, one step at a time.

It knows token ids only; tokenizing, detokenizing and stop strings belong to the front
end. In the server it runs in its own process (see `pagoda.engine.core_process`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pagoda.config import EngineConfig
from pagoda.engine.kv_cache_manager import KVCacheManager
from pagoda.engine.request import Request, RequestStatus
from pagoda.engine.scheduler import Scheduler
from pagoda.engine.scheduler_output import EngineCoreOutput
from pagoda.model_source import ModelSource
from pagoda.platforms import resolve_platform
from pagoda.plugins.lazy import load_target
from pagoda.plugins.manager import get_registries, warn_about_failed_plugins

logger = logging.getLogger(__name__)


@dataclass
class EngineStats:
    """A snapshot for metrics and logs."""

    num_running: int
    num_waiting: int
    kv_cache_usage: float
    prefix_cache_queries: int
    prefix_cache_hits: int
    num_preemptions: int


class EngineCore:
    def __init__(self, config: EngineConfig, source: ModelSource, hf_config: Any,
                 max_model_len: int):
        regs = get_registries()
        warn_about_failed_plugins(regs)
        platform = resolve_platform(config.device)
        executor_name = config.executor or platform.executor
        executor_cls = load_target(regs.executors.get(executor_name).spec.executor)
        self.executor = executor_cls(config, platform.worker, source=source, hf_config=hf_config)

        block_size = config.cache.block_size
        self.num_blocks = self.executor.determine_num_kv_blocks()
        self.executor.initialize_cache(self.num_blocks)
        capacity = self.num_blocks * block_size
        if max_model_len > capacity:
            logger.warning("KV cache holds %d tokens, below the model's %d: max_model_len "
                           "lowered to %d", capacity, max_model_len, capacity)
            max_model_len = capacity
        self.max_model_len = max_model_len
        self.kv_cache = KVCacheManager(self.num_blocks, block_size,
                                       config.cache.enable_prefix_caching)
        self.scheduler = Scheduler(config.scheduler, self.kv_cache, max_model_len)
        self.info = {
            **self.executor.collective_rpc("describe")[0],
            "kv_cache_blocks": self.num_blocks,
            "kv_cache_tokens": capacity,
            "max_model_len": max_model_len,
        }

    def add_request(self, request: Request) -> None:
        self.scheduler.add_request(request)

    def abort_requests(self, request_ids: Iterable[str]) -> None:
        self.scheduler.finish_requests(request_ids, RequestStatus.FINISHED_ABORTED)

    def has_unfinished_requests(self) -> bool:
        return self.scheduler.has_unfinished_requests()

    def step(self) -> list[EngineCoreOutput]:
        """Schedule, run the model once, and report what each request produced."""
        if not self.scheduler.has_unfinished_requests():
            return []
        scheduled = self.scheduler.schedule()
        result = self.executor.execute_model(scheduled)
        return self.scheduler.update_from_output(scheduled, result)

    def stats(self) -> EngineStats:
        s = self.kv_cache.stats
        return EngineStats(self.scheduler.num_running, self.scheduler.num_waiting,
                           self.kv_cache.usage, s.queries, s.hits, self.scheduler.num_preemptions)

    def reset_prefix_cache(self) -> bool:
        return self.kv_cache.reset_prefix_cache()

    def shutdown(self) -> None:
        self.executor.shutdown()
