"""The parent's side of the engine-core process: start it, talk to it, notice its death.

Two daemon threads own the pipe: a sender (so no caller ever blocks on a full pipe
while the core blocks sending to us) and a reader that hands each message to a
callback and reports the process's death (pipe EOF, or the process gone) once.
"""

from __future__ import annotations

import atexit
import itertools
import logging
import multiprocessing
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import replace
from typing import Any

from pagoda.config import EngineConfig
from pagoda.engine.core_process import run_engine_core
from pagoda.engine.messages import (
    CoreFailed,
    Ready,
    Shutdown,
    StepOutputs,
    UtilityCall,
    UtilityResult,
)
from pagoda.model_source import ModelSource

logger = logging.getLogger(__name__)

_POLL_S = 0.5
"""How often the reader checks that the process is alive when the pipe is quiet."""
_MAX_MERGED = 64
"""At most this many waiting messages are taken in one pass of the reader."""


class EngineDeadError(RuntimeError):
    """The engine-core process died or was shut down; requests in flight are lost."""


class EngineRestartingError(EngineDeadError):
    """An engine core died and a new one is starting in its place (`restart_engine`): the
    requests it held are lost, but the same request sent again shortly will be served."""


class RequestTimeoutError(TimeoutError):
    """A request ran longer than its time limit; it was aborted and its blocks freed."""


class EngineOverloadedError(RuntimeError):
    """The engine holds as many requests as it may (`max_waiting_requests`): try later."""


class EngineStartupError(RuntimeError):
    """The engine core failed to start; the message holds the core's traceback."""


class EngineCoreClient:
    """Starts an engine-core process (spawn); `wait_ready` blocks until it is ready.

    `on_outputs` and `on_death` run on the reader thread; `on_death(reason)` runs at
    most once, also after `shutdown`. `data_parallel_rank` says which of several cores
    this is (its devices follow those of the cores before it).
    """

    def __init__(self, config: EngineConfig, source: ModelSource,
                 on_outputs: Callable[[StepOutputs], None], on_death: Callable[[str], None],
                 data_parallel_rank: int = 0):
        self._on_outputs = on_outputs
        self._on_death = on_death
        self._lock = threading.Lock()
        self._dead = False
        self._dead_reason = "the engine core is not running"
        self._closing = False
        self._calls: dict[int, Future[Any]] = {}
        self._call_ids = itertools.count()
        self._outbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._threads = [
            threading.Thread(target=self._send_loop, name="pagoda-core-sender", daemon=True),
            threading.Thread(target=self._read_loop, name="pagoda-core-reader", daemon=True),
        ]
        ctx = multiprocessing.get_context("spawn")
        self._conn, child_conn = ctx.Pipe(duplex=True)
        # A fresh ModelSource: the parent's may hold a parsed GGUF that should not travel.
        self.process = ctx.Process(
            target=run_engine_core, name="pagoda-engine-core",
            args=(child_conn, config, replace(source),
                  logging.getLogger().getEffectiveLevel(), data_parallel_rank),
        )
        self.process.start()
        child_conn.close()
        atexit.register(self.shutdown)
        self.info: dict[str, Any] = {}
        self.max_model_len = 0

    def wait_ready(self) -> None:
        """Block until the core has started; EngineStartupError (after shutting it down)
        if it failed to."""
        try:
            ready = self._wait_ready()
        except BaseException:
            self.shutdown()
            raise
        self.info = ready.info
        self.max_model_len = ready.max_model_len
        for thread in self._threads:
            thread.start()

    @property
    def pid(self) -> int | None:
        return self.process.pid

    def send(self, message: Any) -> None:
        """Queue a message for the core (never blocks); raises EngineDeadError once dead."""
        if self._dead:
            raise EngineDeadError(self._dead_reason)
        self._outbox.put(message)

    def call(self, method: str, *args: Any) -> Future[Any]:
        """Call a utility method on the core with `args`; the future fails with
        EngineDeadError if the core dies first."""
        future: Future[Any] = Future()
        future.set_running_or_notify_cancel()  # a caller's timeout must not cancel it under us
        with self._lock:
            if self._dead:
                future.set_exception(EngineDeadError(self._dead_reason))
                return future
            call_id = next(self._call_ids)
            self._calls[call_id] = future
            self._outbox.put(UtilityCall(call_id, method, args))
        return future

    def shutdown(self, timeout: float = 10.0) -> None:
        """Ask the core to stop, then make sure it has; idempotent."""
        if self._closing:
            return
        self._closing = True
        atexit.unregister(self.shutdown)
        if self._threads[0].is_alive() and not self._dead:
            self._outbox.put(Shutdown())
            self.process.join(timeout)
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(timeout)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        self._report_death("the engine core was shut down")
        for thread in self._threads:
            if thread.is_alive() and thread is not threading.current_thread():
                thread.join(timeout)
        self._conn.close()

    # ---- internals --------------------------------------------------------------------

    def _wait_ready(self) -> Ready:
        exited = "the engine core exited during start-up (exit code {})"
        while not self._conn.poll(_POLL_S):
            if not self.process.is_alive():
                raise EngineStartupError(exited.format(self.process.exitcode))
        try:
            message = self._conn.recv()
        except (EOFError, OSError):
            self.process.join(_POLL_S)
            raise EngineStartupError(exited.format(self.process.exitcode)) from None
        if isinstance(message, CoreFailed):
            raise EngineStartupError(
                f"the engine core failed to start: {message.error}\n\n"
                f"Engine core traceback:\n{message.traceback}"
            )
        return message

    def _send_loop(self) -> None:
        while (message := self._outbox.get()) is not None:
            try:
                self._conn.send(message)
            except (OSError, ValueError):  # broken pipe, or closed
                self._report_death("the engine core's pipe broke")
                return

    def _read_loop(self) -> None:
        while True:
            try:
                if not self._conn.poll(_POLL_S):
                    if self.process.is_alive():
                        continue
                    break
                messages = self._receive_waiting()
            except (EOFError, OSError):
                self.process.join(_POLL_S)
                break
            for message in messages:
                if not self._dispatch(message):
                    return
        self._report_death(f"the engine core died (exit code {self.process.exitcode})")

    def _receive_waiting(self) -> list[Any]:
        """The next message and every one already waiting behind it, with consecutive
        StepOutputs merged into one: a reader that fell behind catches up in one pass of
        output processing instead of one per step."""
        messages = [self._conn.recv()]
        while len(messages) < _MAX_MERGED and self._conn.poll(0):
            message = self._conn.recv()
            last = messages[-1]
            if isinstance(message, StepOutputs) and isinstance(last, StepOutputs):
                messages[-1] = StepOutputs(last.outputs + message.outputs, message.stats)
            else:
                messages.append(message)
        return messages

    def _dispatch(self, message: Any) -> bool:
        """Handle one message from the core; False once the core has failed."""
        if isinstance(message, StepOutputs):
            try:
                self._on_outputs(message)
            except Exception as exc:  # a front-end bug: fail loudly rather than hang
                logger.exception("processing the engine core's outputs failed")
                self._report_death(f"processing the engine core's outputs failed: {exc!r}")
                return False
        elif isinstance(message, UtilityResult):
            with self._lock:
                future = self._calls.pop(message.call_id, None)
            if future is not None:
                future.set_result(message.value)
        elif isinstance(message, CoreFailed):
            self._report_death(f"the engine core failed: {message.error}\n\n"
                               f"Engine core traceback:\n{message.traceback}")
            return False
        return True

    def _report_death(self, reason: str) -> None:
        """Mark the core dead, fail pending calls and tell the owner; once only."""
        if self._closing:
            reason = "the engine core was shut down"
        with self._lock:
            if self._dead:
                return
            self._dead, self._dead_reason = True, reason
            calls, self._calls = self._calls, {}
        self._outbox.put(None)  # stops the sender
        if not self._closing:
            logger.error("%s", reason)
        for future in calls.values():
            future.set_exception(EngineDeadError(reason))
        self._on_death(reason)
