"""The in-process executor: one worker, in this process, on one device."""

from __future__ import annotations

from typing import Any

from pagoda.executor.base import Executor, Worker
from pagoda.plugins.lazy import load_target


class UniProcExecutor(Executor):
    name = "uniproc"

    def __init__(self, config: Any, worker_cls: str | type[Worker], *, first_device: int = 0,
                 **worker_kwargs: Any):
        super().__init__(config)
        if config.parallel.world_size > 1:
            raise ValueError(f"executor 'uniproc' runs one device; "
                             f"{config.parallel.world_size} devices (tensor_parallel_size x "
                             f"pipeline_parallel_size) need executor 'mp' or 'ray'")
        self.worker: Worker = load_target(worker_cls)(config, local_rank=first_device,
                                                      **worker_kwargs)
        self.worker.init_device()
        self.worker.load_model()

    def collective_rpc(
        self, method: str, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> list[Any]:
        return [getattr(self.worker, method)(*args, **(kwargs or {}))]

    def execute_model(self, scheduler_output: Any) -> Any:
        return self.worker.execute_model(scheduler_output)

    def shutdown(self) -> None:
        self.worker.shutdown()
