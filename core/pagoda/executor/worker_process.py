"""A worker in its own process: the loop the multiprocess executor talks to.

Over its pipe the worker receives pickled calls `(method, args, kwargs)` (None to stop)
and answers each with the method's result, except steps: every rank runs
`execute_model` and resolves its result (so that all ranks' request states stay equal),
and one rank (`answering_rank`) alone answers with it; a step that awaits its token
bitmask is resolved and answered at the `provide_token_bitmask` that follows. A call that raises sends `WorkerFailed` and ends the
process: a worker never lingers in a state the others cannot know.
"""

from __future__ import annotations

import contextlib
import logging
import pickle
import signal
import traceback
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from pagoda import logs
from pagoda.plugins.lazy import load_target

STEP_METHODS = ("execute_model", "provide_token_bitmask")
"""Calls whose result is a step's: resolved by every rank, answered by one."""


def answering_rank(config: Any) -> int:
    """The rank whose step results the executor reads: the first of the last pipeline
    stage, which samples."""
    parallel = config.parallel
    return parallel.world_size - parallel.tensor_parallel_size


@dataclass
class WorkerFailed:
    rank: int
    error: str
    traceback: str


def run_worker(conn: Connection, worker_cls: str | type, config: Any, rank: int,
               local_rank: int, init_method: str, worker_kwargs: dict[str, Any],
               log_level: int) -> None:
    """The process's entry point (spawned by `MultiprocExecutor`): the worker of `rank`
    among its engine's workers, driving this host's device `local_rank`."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the engine's to handle
    logs.configure(log_level)
    worker = None
    try:
        worker = load_target(worker_cls)(config, rank=rank, local_rank=local_rank,
                                         distributed_init_method=init_method, **worker_kwargs)
        answers_steps = rank == answering_rank(config)
        while (message := pickle.loads(conn.recv_bytes())) is not None:
            method, args, kwargs = message
            result = getattr(worker, method)(*args, **kwargs)
            if method in STEP_METHODS:
                if getattr(result, "awaits_bitmask", False):
                    continue  # it samples, and answers, at provide_token_bitmask
                result = result.result()
                if not answers_steps:
                    continue
            conn.send(result)
    except (EOFError, OSError):
        pass  # the executor is gone
    except BaseException as exc:
        logging.getLogger(__name__).error("worker rank %d failed: %r", rank, exc)
        with contextlib.suppress(OSError):
            conn.send(WorkerFailed(rank, repr(exc), traceback.format_exc()))
        raise SystemExit(1) from exc
    finally:
        if worker is not None:
            worker.shutdown()
