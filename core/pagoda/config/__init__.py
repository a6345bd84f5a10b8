"""User-facing engine settings."""

from pagoda.config.engine_config import (
    CacheConfig,
    EngineConfig,
    ModelConfig,
    ParallelConfig,
    PoolerConfig,
    SchedulerConfig,
    SpeculativeConfig,
)

__all__ = ["CacheConfig", "EngineConfig", "ModelConfig", "ParallelConfig", "PoolerConfig",
           "SchedulerConfig", "SpeculativeConfig"]
