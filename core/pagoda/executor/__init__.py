"""Executors run workers; see `base` for the interfaces."""

from pagoda.executor.base import Executor, Worker

__all__ = ["Executor", "Worker"]
