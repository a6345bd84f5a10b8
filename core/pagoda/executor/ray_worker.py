"""A worker as a Ray actor: the same `Worker`, driven by remote calls.

The actor is threaded: one thread holds `wait_until_stopped`, a call that returns only when
the executor stops the actor, so that the actor's death ends it with an error the
executor's monitor sees; the others serve the executor's calls. Ray runs a threaded
actor's tasks as their arguments arrive, not in the order they were submitted (a step
whose scheduler output travels through the object store may start after the next one),
so every call carries its turn (`ticket`) and waits for it: the worker sees its steps in
the executor's order, as the pipeline stages' transfers need.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from collections.abc import Iterator
from typing import Any

from pagoda import logs
from pagoda.plugins.lazy import load_target


class RayWorker:
    def __init__(self, worker_cls: str | type, config: Any, rank: int, answers_steps: bool,
                 worker_kwargs: dict[str, Any], log_level: int):
        logs.configure(log_level)
        self.worker_cls, self.config, self.rank = worker_cls, config, rank
        self.answers_steps = answers_steps
        self.worker_kwargs = worker_kwargs
        self.worker: Any = None
        self._stopped = threading.Event()
        self._turn = 0
        """The ticket of the call that runs next."""
        self._turn_changed = threading.Condition()

    @contextlib.contextmanager
    def _in_turn(self, ticket: int) -> Iterator[None]:
        """Run the body once every call of an earlier ticket has run."""
        with self._turn_changed:
            self._turn_changed.wait_for(lambda: self._turn == ticket)
        try:
            yield
        finally:
            with self._turn_changed:
                self._turn += 1
                self._turn_changed.notify_all()

    def address(self) -> tuple[str, int, int]:
        """(this node's IP, a free port on it, this process's id)."""
        import ray

        with socket.socket() as s:
            s.bind(("", 0))
            return ray.util.get_node_ip_address(), int(s.getsockname()[1]), os.getpid()

    def start(self, ticket: int, init_method: str) -> None:
        """Build the worker. Ray shows each actor only its own device (index 0)."""
        with self._in_turn(ticket):
            self.worker = load_target(self.worker_cls)(
                self.config, rank=self.rank, local_rank=0, distributed_init_method=init_method,
                **self.worker_kwargs)

    def call(self, ticket: int, method: str, args: tuple[Any, ...],
             kwargs: dict[str, Any]) -> Any:
        with self._in_turn(ticket):
            return getattr(self.worker, method)(*args, **kwargs)

    def execute_model(self, ticket: int, scheduler_output: Any) -> Any:
        """Every rank resolves its step (request states stay equal); one answers. A step
        that awaits its token bitmask is resolved at `provide_token_bitmask`."""
        with self._in_turn(ticket):
            result = self.worker.execute_model(scheduler_output)
            if getattr(result, "awaits_bitmask", False):
                return None
            output = result.result()
        return output if self.answers_steps else None

    def provide_token_bitmask(self, ticket: int, bitmask: Any) -> Any:
        with self._in_turn(ticket):
            result = self.worker.provide_token_bitmask(bitmask).result()
        return result if self.answers_steps else None

    def wait_until_stopped(self) -> None:
        self._stopped.wait()

    def stop(self) -> None:
        if self.worker is not None:
            self.worker.shutdown()
        self._stopped.set()
