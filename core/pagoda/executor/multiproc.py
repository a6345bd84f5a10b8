"""The multiprocess executor: one worker process per device, joined by torch.distributed.

Each call goes to every worker over its own pipe, pickled once: control calls
(`collective_rpc`) and each step's scheduler output, which is token ids and block tables,
no tensors. Every worker answers a control call; the first rank of the last pipeline
stage answers a step, and the step's result is read only when the engine asks for it, so
steps overlap as they do in process (and, with pipeline stages, several are in flight).
Whoever waits on the workers (a call, a step's result, the engine core's idle loop through
`health_handles`) also waits on their process sentinels: a worker that dies or fails ends
the wait at once with `WorkerDiedError`, naming its rank and its traceback or exit code.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import pickle
import socket
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Any

from pagoda.engine.scheduler_output import ModelRunnerOutput, SchedulerOutput
from pagoda.executor.base import Executor, Worker, WorkerDiedError
from pagoda.executor.worker_process import WorkerFailed, answering_rank, run_worker

logger = logging.getLogger(__name__)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _StepReply:
    """A launched step's result, read from rank 0 when asked for."""

    def __init__(self, executor: MultiprocExecutor):
        self._executor = executor
        self._output: ModelRunnerOutput | None = None

    def result(self) -> ModelRunnerOutput:
        if self._output is None:
            self._output = self._executor._receive([self._executor.answering_rank])[0]
        return self._output


class MultiprocExecutor(Executor):
    name = "mp"

    def __init__(self, config: Any, worker_cls: str | type[Worker], *, first_device: int = 0,
                 **worker_kwargs: Any):
        super().__init__(config)
        ctx = multiprocessing.get_context("spawn")
        init_method = f"tcp://127.0.0.1:{_free_port()}"
        level = logging.getLogger().getEffectiveLevel()
        self.answering_rank = answering_rank(config)
        self.processes: list[BaseProcess] = []
        self._conns: list[Connection] = []
        self._closing = False
        for rank in range(config.parallel.world_size):
            conn, child = ctx.Pipe(duplex=True)
            process = ctx.Process(
                target=run_worker, name=f"pagoda-worker-{rank}", daemon=True,
                args=(child, worker_cls, config, rank, first_device + rank, init_method,
                      worker_kwargs, level))
            process.start()
            child.close()
            self.processes.append(process)
            self._conns.append(conn)
        try:
            self.collective_rpc("init_device")
            self.collective_rpc("load_model")
        except BaseException:
            self.shutdown()
            raise

    def collective_rpc(
        self, method: str, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> list[Any]:
        self._send(method, args, kwargs)
        return self._receive(range(len(self._conns)))

    def execute_model(self, scheduler_output: SchedulerOutput) -> _StepReply:
        self._send("execute_model", (scheduler_output,), None)
        return _StepReply(self)

    def provide_token_bitmask(self, bitmask: Any) -> None:
        # The answering rank replies to this instead of to the step's execute_model.
        self._send("provide_token_bitmask", (bitmask,), None)

    def health_handles(self) -> list[Any]:
        return [p.sentinel for p in self.processes]

    def check_health(self) -> None:
        # By the sentinels, not is_alive(): a dying process closes its sentinel a moment
        # before its exit status can be read.
        sentinels = {p.sentinel: rank for rank, p in enumerate(self.processes)}
        for ready in wait(list(sentinels), timeout=0):
            raise self._death(sentinels[ready])

    def shutdown(self) -> None:
        if self._closing:
            return
        self._closing = True
        stop = pickle.dumps(None)
        for conn, process in zip(self._conns, self.processes):
            if process.is_alive():
                with contextlib.suppress(OSError):
                    conn.send_bytes(stop)
        for process in self.processes:
            process.join(10)
            if process.is_alive():
                process.kill()
                process.join()
        for conn in self._conns:
            conn.close()

    # ---- internals --------------------------------------------------------------------

    def _send(self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any] | None) -> None:
        message = pickle.dumps((method, args, kwargs or {}), protocol=pickle.HIGHEST_PROTOCOL)
        for rank, conn in enumerate(self._conns):
            try:
                conn.send_bytes(message)
            except OSError:
                raise self._death(rank) from None

    def _receive(self, ranks: Any) -> list[Any]:
        """The next message of each of `ranks`, in rank order; WorkerDiedError as soon as
        any worker (of these ranks or not) dies or reports a failure."""
        waiting = {self._conns[rank]: rank for rank in ranks}
        results: dict[int, Any] = {}
        sentinels = {p.sentinel: rank for rank, p in enumerate(self.processes)}
        while waiting:
            for ready in wait([*waiting, *sentinels]):
                if ready in sentinels:
                    raise self._death(sentinels[ready])
                rank = waiting.pop(ready)
                try:
                    message = ready.recv()
                except (EOFError, OSError):
                    raise self._death(rank) from None
                if isinstance(message, WorkerFailed):
                    raise self._failure(message)
                results[rank] = message
        return [results[rank] for rank in sorted(results)]

    def _death(self, rank: int) -> WorkerDiedError:
        """Why worker `rank` is gone: its own report if it sent one, else its exit code."""
        conn, process = self._conns[rank], self.processes[rank]
        try:
            while conn.poll():
                message = conn.recv()
                if isinstance(message, WorkerFailed):
                    return self._failure(message)
        except (EOFError, OSError):
            pass
        process.join(1)
        return WorkerDiedError(f"worker rank {rank} (pid {process.pid}) died "
                               f"(exit code {process.exitcode})")

    @staticmethod
    def _failure(failed: WorkerFailed) -> WorkerDiedError:
        return WorkerDiedError(f"worker rank {failed.rank} failed: {failed.error}\n\n"
                               f"Worker traceback:\n{failed.traceback}")
