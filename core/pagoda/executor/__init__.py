"""Executors run workers; see `base` for the interfaces."""

from pagoda.executor.base import Executor, Worker, WorkerDiedError

__all__ = ["Executor", "Worker", "WorkerDiedError"]
