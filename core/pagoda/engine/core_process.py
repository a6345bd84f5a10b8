"""The engine core in its own process: a busy loop around `EngineCore`.

The parent (`pagoda.frontend.core_client`) and this process talk over one duplex pipe
with the messages of `pagoda.engine.messages`. The loop drains the pipe, steps while there is
work, queues each step's outputs with a stats snapshot for a sender thread (so a parent
that reads slowly never holds up the next step), and blocks on the pipe when idle. It
exits on `Shutdown`, or when the pipe breaks (the parent died).
"""

from __future__ import annotations

import ctypes
import logging
import queue
import signal
import threading
import traceback
from multiprocessing.connection import Connection, wait
from typing import Any

from pagoda import logs
from pagoda.config import EngineConfig
from pagoda.engine.core import EngineCore
from pagoda.engine.messages import (
    UTILITY_METHODS,
    AddRequests,
    CoreFailed,
    FinishRequests,
    Ready,
    Shutdown,
    StepOutputs,
    UtilityCall,
    UtilityResult,
)
from pagoda.frontend.model_frontend import check_draft_model, config_eos_token_id, model_config
from pagoda.lora.adapter import base_shapes
from pagoda.model_source import ModelSource

logger = logging.getLogger(__name__)


def run_engine_core(conn: Connection, config: EngineConfig, source: ModelSource,
                    log_level: int = logging.WARNING, data_parallel_rank: int = 0) -> None:
    """The process's entry point: read the model's HF config (the front end imports no
    torch, which transformers' configs need), build the core, report Ready with the
    config's `vocab_size` and `eos_token_id` in its info (or CoreFailed), serve.
    `log_level`: the parent's, so the core's start-up lines show where the parent's do.
    The core loads the tokenizer itself when it needs one (its first grammar, a draft
    model's check), while the front end loads its own as the core starts."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    logs.configure(log_level)
    logger.debug("Engine core process started (its modules imported)")
    try:
        hf_config, config.model.max_model_len = model_config(config, source)
        logger.debug("Model config read: %s", type(hf_config).__name__)
        if config.speculative.speculative_model is not None:  # (the front end cannot: torch)
            check_draft_model(config, hf_config, source.tokenizer(config.model.tokenizer))
        core = EngineCore(config, source, hf_config, config.model.max_model_len,
                          data_parallel_rank)
        _return_free_heap()
    except BaseException as exc:
        conn.send(CoreFailed(repr(exc), traceback.format_exc()))
        raise SystemExit(1) from exc
    outbox = _Outbox(conn)
    try:
        info = {**core.info, "vocab_size": hf_config.vocab_size,
                "lora_base_shapes": base_shapes(hf_config),
                "eos_token_id": config_eos_token_id(hf_config)}
        conn.send(Ready(info, core.max_model_len))
        _CoreLoop(core, conn, outbox).run()
        outbox.close()
    except (EOFError, OSError):
        pass  # the parent is gone
    except BaseException as exc:
        if outbox.close(timeout=5.0):  # the failure comes after every output sent before it
            conn.send(CoreFailed(repr(exc), traceback.format_exc()))
        raise SystemExit(1) from exc
    finally:
        core.shutdown()


def _return_free_heap() -> None:
    """Hand the C heap's free pages back to the system once the core is built: loading
    frees much (a parsed GGUF, float copies of quantized weights) that would otherwise
    stay resident. glibc's malloc_trim; nothing where the C library has none."""
    trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
    if trim is not None:
        trim(0)


class _Outbox:
    """Messages to the parent, in order, written by a thread of their own."""

    def __init__(self, conn: Connection):
        self._conn = conn
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._send_all, name="pagoda-core-outbox",
                                        daemon=True)
        self._thread.start()

    def put(self, message: Any) -> None:
        """Queue a message; raises what stopped the sender (a broken pipe: the parent is
        gone) once it has stopped."""
        if self._error is not None:
            raise self._error
        self._queue.put(message)

    def close(self, timeout: float | None = None) -> bool:
        """Send what is queued and stop; True once the sender has stopped (the pipe is
        then free for a direct send)."""
        self._queue.put(None)
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _send_all(self) -> None:
        while (message := self._queue.get()) is not None:
            try:
                self._conn.send(message)
            except BaseException as exc:
                self._error = exc
                return


class _CoreLoop:
    def __init__(self, core: EngineCore, conn: Connection, outbox: _Outbox):
        self.core = core
        self.conn = conn
        self.outbox = outbox
        self.running = True

    def run(self) -> None:
        workers = self.core.executor.health_handles()
        while self.running:
            if not self.core.has_unfinished_requests():
                # Idle: block until the parent speaks, or a worker process dies.
                if self.conn not in wait([self.conn, *workers]):
                    self.core.executor.check_health()  # raises: a worker is gone
                    continue
                self.handle(self.conn.recv())
            while self.running and self.conn.poll():
                self.handle(self.conn.recv())
            if self.running:
                self.outbox.put(StepOutputs(self.core.step(), self.core.stats()))

    def handle(self, message: Any) -> None:
        if isinstance(message, AddRequests):
            for request in message.requests:
                self.core.add_request(request)
        elif isinstance(message, FinishRequests):
            self.core.scheduler.finish_requests(message.request_ids, message.status)
        elif isinstance(message, UtilityCall):
            if message.method not in UTILITY_METHODS:
                raise ValueError(f"unknown utility method {message.method!r}")
            value = getattr(self.core, message.method)(*message.args)
            self.outbox.put(UtilityResult(message.call_id, value))
        elif isinstance(message, Shutdown):
            self.running = False
        else:
            raise TypeError(f"unexpected message {type(message).__name__}")
