"""User-facing engine settings."""

from pagoda.config.engine_config import (
    CacheConfig,
    EngineConfig,
    LoRAConfig,
    ModelConfig,
    ParallelConfig,
    PoolerConfig,
    SchedulerConfig,
    SpeculativeConfig,
)

__all__ = ["CacheConfig", "EngineConfig", "LoRAConfig", "ModelConfig", "ParallelConfig", "PoolerConfig",
           "SchedulerConfig", "SpeculativeConfig"]
