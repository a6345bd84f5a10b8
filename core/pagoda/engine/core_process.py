"""The engine core in its own process: a busy loop around `EngineCore`.

The parent (`pagoda.engine.core_client`) and this process talk over one duplex pipe
with the picklable messages below. The loop drains the pipe, steps while there is
work, sends each step's outputs with a stats snapshot, and blocks on the pipe when
idle. It exits on `Shutdown`, or when the pipe breaks (the parent died).
"""

from __future__ import annotations

import signal
import traceback
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from pagoda.config import EngineConfig
from pagoda.engine.core import EngineCore, EngineStats
from pagoda.engine.request import Request, RequestStatus
from pagoda.engine.scheduler_output import EngineCoreOutput
from pagoda.model_source import ModelSource

# ---- parent -> core -------------------------------------------------------------------


@dataclass
class AddRequests:
    requests: list[Request]
    """All children of one prompt, in one message so `fork_of` links survive pickling."""


@dataclass
class FinishRequests:
    request_ids: list[str]
    status: RequestStatus
    """FINISHED_ABORTED (abort, disconnect) or FINISHED_STOPPED (a stop string)."""


@dataclass
class UtilityCall:
    call_id: int
    method: str
    """One of UTILITY_METHODS, called on the EngineCore with no arguments."""


@dataclass
class Shutdown:
    pass


UTILITY_METHODS = ("stats", "reset_prefix_cache")

# ---- core -> parent -------------------------------------------------------------------


@dataclass
class Ready:
    info: dict[str, Any]
    max_model_len: int
    """The core's final value: it may lower the requested one to the KV cache capacity."""


@dataclass
class CoreFailed:
    """Start-up or a step raised; the process exits after sending this."""

    error: str
    traceback: str


@dataclass
class StepOutputs:
    outputs: list[EngineCoreOutput]
    stats: EngineStats


@dataclass
class UtilityResult:
    call_id: int
    value: Any


def run_engine_core(conn: Connection, config: EngineConfig, source: ModelSource,
                    hf_config: Any, max_model_len: int) -> None:
    """The process's entry point: build the core, report Ready (or CoreFailed), serve."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    try:
        core = EngineCore(config, source, hf_config, max_model_len)
    except BaseException as exc:
        conn.send(CoreFailed(repr(exc), traceback.format_exc()))
        raise SystemExit(1) from exc
    try:
        conn.send(Ready(core.info, core.max_model_len))
        _CoreLoop(core, conn).run()
    except (EOFError, OSError):
        pass  # the parent is gone
    except BaseException as exc:
        conn.send(CoreFailed(repr(exc), traceback.format_exc()))
        raise SystemExit(1) from exc
    finally:
        core.shutdown()


class _CoreLoop:
    def __init__(self, core: EngineCore, conn: Connection):
        self.core = core
        self.conn = conn
        self.running = True

    def run(self) -> None:
        while self.running:
            if not self.core.has_unfinished_requests():
                self.handle(self.conn.recv())  # idle: block until the parent speaks
            while self.running and self.conn.poll():
                self.handle(self.conn.recv())
            if self.running:
                self.conn.send(StepOutputs(self.core.step(), self.core.stats()))

    def handle(self, message: Any) -> None:
        if isinstance(message, AddRequests):
            for request in message.requests:
                self.core.add_request(request)
        elif isinstance(message, FinishRequests):
            self.core.scheduler.finish_requests(message.request_ids, message.status)
        elif isinstance(message, UtilityCall):
            if message.method not in UTILITY_METHODS:
                raise ValueError(f"unknown utility method {message.method!r}")
            value = getattr(self.core, message.method)()
            self.conn.send(UtilityResult(message.call_id, value))
        elif isinstance(message, Shutdown):
            self.running = False
        else:
            raise TypeError(f"unexpected message {type(message).__name__}")
