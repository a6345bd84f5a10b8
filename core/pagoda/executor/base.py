"""The Executor and Worker interfaces.

A worker owns one device and a model runner. An executor runs the workers: in-process,
one process per device (torch.distributed), or on a Ray cluster. `collective_rpc` is for
control only; the per-step path is `execute_model`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar


class Worker(ABC):
    """One device: initialises it, loads the model, owns the KV cache, runs steps."""

    def __init__(self, config: Any, rank: int = 0, local_rank: int = 0,
                 distributed_init_method: str | None = None):
        self.config = config
        self.rank = rank
        self.local_rank = local_rank
        self.distributed_init_method = distributed_init_method

    @abstractmethod
    def init_device(self) -> None:
        """Select the device, join the process group if there is more than one worker."""

    @abstractmethod
    def load_model(self) -> None:
        """Build the model on the device and load its weights."""

    @abstractmethod
    def determine_num_kv_blocks(self) -> int:
        """How many KV cache blocks fit in the memory this worker may use."""

    @abstractmethod
    def initialize_cache(self, num_blocks: int) -> None:
        """Allocate `num_blocks` blocks of KV cache for every layer."""

    @abstractmethod
    def execute_model(self, scheduler_output: Any) -> Any:
        """Run one step; return sampled tokens (and logprobs) per request."""

    def provide_token_bitmask(self, bitmask: Any) -> Any:
        """The token bitmask of the launched step that awaits one
        (`grammar_bitmask_later`): it samples now. Returns the step's result."""
        raise NotImplementedError(f"{type(self).__name__} cannot sample with a token "
                                  "bitmask that comes after the step's launch")

    def shutdown(self) -> None:
        """Release the device."""


class Executor(ABC):
    """Runs workers and fans control calls out to them.

    The engine core builds one as `cls(config, worker_cls, first_device=..., **kwargs)`:
    `config.parallel.world_size` workers of class `worker_cls` (a `Worker`, or its
    "module:Class" name), on this host's devices `first_device` onwards, each given
    `kwargs`; it returns once every worker has loaded the model.
    """

    name: ClassVar[str]

    def __init__(self, config: Any):
        self.config = config

    @abstractmethod
    def collective_rpc(
        self, method: str, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> list[Any]:
        """Call `method` on every worker; return their results in rank order."""

    def execute_model(self, scheduler_output: Any) -> Any:
        """Run one step on all workers; the driver's (rank 0) output is the step's result."""
        return self.collective_rpc("execute_model", (scheduler_output,))[0]

    def provide_token_bitmask(self, bitmask: Any) -> None:
        """Hand the launched step that awaits its token bitmask (`grammar_bitmask_later`)
        its bitmask; the future `execute_model` returned then resolves."""
        self.collective_rpc("provide_token_bitmask", (bitmask,))

    def determine_num_kv_blocks(self) -> int:
        return min(self.collective_rpc("determine_num_kv_blocks"))

    def initialize_cache(self, num_blocks: int) -> None:
        self.collective_rpc("initialize_cache", (num_blocks,))

    def health_handles(self) -> list[Any]:
        """What `multiprocessing.connection.wait` can wait on to notice a worker's death
        (process sentinels); none for workers in this process."""
        return []

    def check_health(self) -> None:
        """Raise WorkerDiedError if a worker has died (or one of `health_handles` is
        ready)."""

    def shutdown(self) -> None:
        """Stop the workers."""


class WorkerDiedError(RuntimeError):
    """A worker process died or failed; the message says which and why."""
