"""`AsyncLLM`: the asyncio front end the server uses, over engine cores in processes of
their own (one, or `data_parallel_size` behind a load balancer).

The front end tokenizes and validates on the caller's event loop, and detokenizes and
applies stop strings on the cores' reader threads as each step's outputs arrive; each
request's outputs reach its consumer through a queue on the consumer's own loop.

A request may have a time limit (`timeout`): past it, it is aborted in its core (its blocks
freed) and its consumer gets RequestTimeoutError. With `restart_engine`, a core that dies
fails only its own requests, with the retryable EngineRestartingError, and a new core of
the same config takes its place; `AsyncLLM.supervisor` (`pagoda.frontend.core_supervisor`)
decides what a core's death does, and says whether the engine takes new requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

from pagoda.config import EngineConfig
from pagoda.engine.messages import FinishRequests, StepOutputs
from pagoda.engine.request import Request, RequestStatus
from pagoda.frontend.core_client import (
    EngineDeadError,
    EngineOverloadedError,
    EngineRestartingError,
    EngineStartupError,
    RequestTimeoutError,
)
from pagoda.frontend.core_supervisor import CoreSupervisor
from pagoda.frontend.engine_cores import EngineCores, combined_stats
from pagoda.frontend.input_processor import ProcessedPrompt
from pagoda.frontend.model_frontend import ModelFrontend
from pagoda.frontend.output_processor import OutputProcessor
from pagoda.frontend.request_streams import Output, RequestCounters, Stream, deliver_all
from pagoda.frontend.restarts import RestartBudget
from pagoda.inputs import PromptInput
from pagoda.lora.request import LoRARequest
from pagoda.model_source import resolve_model
from pagoda.outputs import EngineStats, PoolingRequestOutput, RequestOutput
from pagoda.pooling import PoolerSpec
from pagoda.pooling_params import PoolingParams
from pagoda.sampling_params import SamplingParams

__all__ = ["AsyncLLM", "EngineDeadError", "EngineOverloadedError", "EngineRestartingError",
           "EngineStartupError", "RequestCounters", "RequestTimeoutError"]

_NO_STATS = EngineStats(0, 0, 0.0, 0, 0, 0)


class AsyncLLM:
    """Generate with asyncio while the engine cores run in processes of their own.

    Construction loads the tokenizer, starts the cores and blocks until they are ready;
    a core that fails to start raises EngineStartupError with its traceback. One core
    dying fails every request in flight, as the engine is then dead; unless
    `restart_engine`: then it fails its own requests with EngineRestartingError and is
    replaced by a new core (within `restart_budget`; past it, the engine is dead).
    """

    def __init__(self, config: EngineConfig, *, restart_engine: bool = False,
                 restart_budget: RestartBudget | None = None):
        self.config = config
        self._lock = threading.Lock()
        self._streams: dict[str, Stream] = {}
        self._counters = RequestCounters()
        self._last_stats = [_NO_STATS] * config.parallel.data_parallel_size
        self.supervisor = CoreSupervisor(
            self._lock, (restart_budget or RestartBudget()) if restart_engine else None,
            core_down=self._core_down, engine_dead=self._engine_dead,
            core_replaced=self._core_replaced)
        """The cores' health: whether new requests are taken (`is_healthy`,
        `unavailable()`), why the engine is dead, which cores are restarting."""
        sched = config.scheduler
        self._max_requests = (None if sched.max_waiting_requests is None else
                              (sched.max_num_seqs + sched.max_waiting_requests)
                              * config.parallel.data_parallel_size)
        """Most requests in the engine at once (running and waiting), or None."""
        # The cores start first and the tokenizer loads while they do (each takes seconds).
        source = resolve_model(config.model.model)
        self._cores = EngineCores(config, source, self._on_outputs, self.supervisor.on_death)
        try:
            self.frontend = ModelFrontend.load(config, core_in_process=False, source=source)
        except BaseException:
            self._cores.shutdown()
            raise
        self.tokenizer: Any = self.frontend.tokenizer
        self.generation_defaults: dict[str, Any] = self.frontend.generation_defaults
        self.served_model_names: list[str] = (config.model.served_model_name
                                              or [source.name])
        self.model_name: str = self.served_model_names[0]
        self._output_processor = OutputProcessor(self.tokenizer)
        self._cores.wait_ready()
        self.supervisor.watch(self._cores)
        self.info: dict[str, Any] = self._cores.info
        self.frontend.set_model_facts(self.info["vocab_size"], self.info["eos_token_id"],
                                      self.info["lora_base_shapes"])
        self.vocab_size: int = self.frontend.vocab_size
        self.eos_token_id: int | None = self.frontend.eos_token_id
        self.max_model_len: int = self._cores.max_model_len
        self.pooler: PoolerSpec | None = self.info["pooler"]
        """What the model outputs if it is a pooling model; None: it generates."""
        self._input_processor = self.frontend.input_processor(self.max_model_len, self.pooler,
                                                              config.lora)

    # ---- requests ---------------------------------------------------------------------

    async def generate(self, prompt: PromptInput, params: SamplingParams, request_id: str,
                       priority: int = 0, lora_request: LoRARequest | None = None,
                       timeout: float | None = None) -> AsyncIterator[RequestOutput]:
        """Stream one request's cumulative outputs; the last has `finished` True.

        Bad input raises ValueError (TypeError for a prompt of the wrong type) on the first
        iteration, before the core hears of the request; so does a request id in use.
        Leaving early (break, cancellation, a client disconnect) aborts the request and
        frees its blocks. If the core dies, raises EngineDeadError (EngineRestartingError
        when a new one is starting). A `lora_request` not seen before is added first
        (`add_lora_adapter`). A request not finished `timeout` seconds after the first
        iteration is aborted and raises RequestTimeoutError.
        """
        expiry = self._expiry(timeout)
        check = self._input_processor.check_adapter
        if lora_request is not None and check is not None and not check.known(lora_request):
            await self.add_lora_adapter(lora_request)
        stream = self._add_request(prompt, params, request_id, priority, lora_request)
        timer = self._start_timer(expiry, request_id, stream, timeout)
        finished = False
        try:
            while not finished:
                item = await stream.next()
                if isinstance(item, Exception):
                    raise item
                finished = item.finished
                yield item
        finally:
            if timer is not None:
                timer.cancel()
            if not finished:
                self._abort(request_id, stream)

    async def encode(self, prompt: PromptInput | ProcessedPrompt, params: PoolingParams,
                     request_id: str, priority: int = 0, timeout: float | None = None
                     ) -> PoolingRequestOutput:
        """A pooling model's output for one prompt: its embedding, or a text pair's score
        (`tokenize_pair`). Bad input raises ValueError (TypeError for a prompt of the
        wrong type) before the core hears of the request. Cancellation aborts it; so does
        `abort`, after which the output's data is None. If the core dies, raises
        EngineDeadError (EngineRestartingError when a new one is starting); after
        `timeout` seconds, aborts it and raises RequestTimeoutError."""
        expiry = self._expiry(timeout)
        self.supervisor.raise_if_unavailable()
        processed = (prompt if isinstance(prompt, ProcessedPrompt)
                     else self._input_processor.tokenize(prompt))
        request = self._input_processor.make_pooling_request(request_id, processed, params,
                                                             priority)
        stream = self._submit(request_id, [request],
                              lambda: self._output_processor.add_pooling(request_id, processed))
        timer = self._start_timer(expiry, request_id, stream, timeout)
        finished = False
        try:
            item = await stream.next()
            if isinstance(item, Exception):
                raise item
            finished = True
            assert isinstance(item, PoolingRequestOutput)
            return item
        finally:
            if timer is not None:
                timer.cancel()
            if not finished:
                self._abort(request_id, stream)

    def tokenize_pair(self, text_1: str, text_2: str) -> ProcessedPrompt:
        """A text pair as the model's tokenizer encodes it for a cross-encoder."""
        return self._input_processor.tokenize_pair(text_1, text_2)

    async def abort(self, request_id: str) -> None:
        """Abort a request; its consumer gets a last output with finish_reason "abort"."""
        self._abort(request_id)

    def default_sampling_params(self) -> SamplingParams:
        """SamplingParams with the model's generation_config.json defaults applied."""
        return self.frontend.default_sampling_params()

    # ---- engine state -----------------------------------------------------------------

    async def stats(self) -> EngineStats:
        """A fresh snapshot of the cores together, taken after every message sent before
        it."""
        return combined_stats(await self.core_stats())

    async def core_stats(self) -> list[EngineStats]:
        """A fresh snapshot of each core that is up (data parallelism: one per core; none
        of a core being restarted)."""
        futures = self._cores.call("stats")
        return list(await asyncio.gather(*map(asyncio.wrap_future, futures)))

    @property
    def last_stats(self) -> EngineStats:
        """The snapshots that came with each core's latest step, combined (never blocks or
        raises)."""
        return combined_stats(self._last_stats)

    @property
    def counters(self) -> RequestCounters:
        """A copy of the request counters."""
        with self._lock:
            c = self._counters
            return RequestCounters(c.prompt_tokens, c.generation_tokens, dict(c.finished),
                                   c.timed_out, c.core_restarts)

    @property
    def num_unfinished_requests(self) -> int:
        return len(self._streams)

    async def reset_prefix_cache(self) -> bool:
        """Drop all cached prefix blocks; False if a core has blocks in use (that core's
        cache is left as it is)."""
        futures = self._cores.call("reset_prefix_cache")
        return all(await asyncio.gather(*map(asyncio.wrap_future, futures)))

    @property
    def core_pid(self) -> int | None:
        """The (first) engine core's process id."""
        return self._cores.pids[0]

    @property
    def core_pids(self) -> list[int | None]:
        return self._cores.pids

    def shutdown(self) -> None:
        """Stop the cores; requests in flight raise EngineDeadError. Idempotent, and run
        at interpreter exit."""
        self.supervisor.shutdown()

    async def add_lora_adapter(self, lora: LoRARequest) -> None:
        """Check `lora` (ValueError naming what is wrong, or that LoRA is off) and have the
        engine cores read it into host memory, so that its first request does not wait for
        the disk."""
        check = self._input_processor.check_adapter
        if check is None or not check.enabled:
            raise ValueError("LoRA is off (start the engine with enable_lora)")
        check(lora)
        futures = self._cores.call("add_lora", lora)
        problem = next(filter(None, await asyncio.gather(*map(asyncio.wrap_future, futures))),
                       None)
        if problem is not None:
            check.forget(lora.lora_int_id)
            raise ValueError(problem)

    async def remove_lora_adapter(self, lora_int_id: int) -> None:
        """The cores drop the adapter's host copies; the id may name another adapter from
        now on."""
        if self._input_processor.check_adapter is not None:
            self._input_processor.check_adapter.forget(lora_int_id)
        await asyncio.gather(*map(asyncio.wrap_future,
                                  self._cores.call("remove_lora", lora_int_id)))

    # ---- internals --------------------------------------------------------------------

    def _add_request(self, prompt: PromptInput, params: SamplingParams, request_id: str,
                     priority: int, lora_request: LoRARequest | None = None) -> Stream:
        self.supervisor.raise_if_unavailable()
        processed = self._input_processor.tokenize(prompt)
        requests = self._input_processor.make_requests(request_id, processed, params, priority,
                                                       lora_request=lora_request)
        return self._submit(request_id, requests, lambda: self._output_processor.add(
            request_id, processed, requests))

    def _submit(self, request_id: str, requests: list[Request],
                track: Callable[[], None]) -> Stream:
        """Send a request's core requests and `track` it in the output processor."""
        stream = Stream(asyncio.get_running_loop())
        with self._lock:
            self.supervisor.raise_if_unavailable()
            if request_id in self._streams:
                raise ValueError(f"request id {request_id!r} is already in use")
            if self._max_requests is not None and len(self._streams) >= self._max_requests:
                raise EngineOverloadedError(
                    f"the engine holds {len(self._streams)} requests, as many as it may "
                    f"(max_num_seqs running and max_waiting_requests waiting): try again "
                    f"later")
            try:
                self._cores.add(request_id, requests)
            except EngineDeadError as exc:  # the core died a moment ago: say so as it will
                raise self.supervisor.send_failed(exc) from None
            track()
            self._streams[request_id] = stream
        return stream

    def _expiry(self, timeout: float | None) -> float | None:
        """When (the running loop's clock) a request given `timeout` now expires."""
        if timeout is None:
            return None
        if not timeout > 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
        return asyncio.get_running_loop().time() + timeout

    def _start_timer(self, expiry: float | None, request_id: str, stream: Stream,
                     timeout: float | None) -> asyncio.TimerHandle | None:
        """At `expiry`, abort the request and fail its stream with RequestTimeoutError."""
        if expiry is None:
            return None
        error = RequestTimeoutError(f"the request took longer than its time limit of "
                                    f"{timeout:g} s (request_timeout) and was aborted")
        return asyncio.get_running_loop().call_at(expiry, self._abort, request_id, stream,
                                                  error)

    def _abort(self, request_id: str, stream: Stream | None = None,
               error: Exception | None = None) -> None:
        """Abort a request in its core; its consumer gets its last output, or `error`."""
        with self._lock:
            current = self._streams.get(request_id)
            if current is None or (stream is not None and current is not stream):
                return
            del self._streams[request_id]
            child_ids = self._output_processor.child_ids(request_id)
            with contextlib.suppress(EngineDeadError):  # a dead core frees nothing
                self._cores.finish(request_id, FinishRequests(
                    child_ids, RequestStatus.FINISHED_ABORTED))
            final = self._forget(request_id)
            if isinstance(error, RequestTimeoutError):
                self._counters.timed_out += 1
            if error is not None:
                current.put(error)
            elif final is not None:
                current.put(final)

    def _on_outputs(self, core: int, message: StepOutputs) -> None:
        """Reader thread of `core`: detokenize, apply stop strings, hand outputs to their
        streams."""
        with self._lock:
            if self.supervisor.errored:
                return  # another core died: every stream has its error already
            self._last_stats[core] = message.stats
            self._counters.generation_tokens += sum(len(o.new_token_ids)
                                                    for o in message.outputs)
            outputs, stopped = self._output_processor.process(message.outputs)
            if stopped:
                with contextlib.suppress(EngineDeadError):  # a dead core frees nothing
                    self._cores.clients[core].send(FinishRequests(
                        stopped, RequestStatus.FINISHED_STOPPED))
            by_loop: dict[asyncio.AbstractEventLoop, list[tuple[Stream, Output]]] = {}
            for output in outputs:
                stream = self._streams[output.request_id]
                if not stream.prompt_counted and (isinstance(output, PoolingRequestOutput)
                                                  or any(c.token_ids for c in output.outputs)):
                    stream.prompt_counted = True
                    self._counters.prompt_tokens += len(output.prompt_token_ids)
                if output.finished:
                    del self._streams[output.request_id]
                    self._cores.forget(output.request_id)
                    self._counters.count_finished(output)
                by_loop.setdefault(stream.loop, []).append((stream, output))
        for loop, items in by_loop.items():  # one wake-up per loop and step, not per request
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(deliver_all, items)

    # ---- the supervisor's callbacks (lock held) ---------------------------------------

    def _core_down(self, core: int) -> list[Stream]:
        """`core` died and a new one is starting: count the restart, forget the core's
        stats and its requests (their streams, their state in the output processor, their
        load; counted as aborted). Returns their streams."""
        self._counters.core_restarts += 1
        self._last_stats[core] = _NO_STATS
        streams = []
        for request_id in self._cores.requests_of(core):
            stream = self._streams.pop(request_id, None)
            self._forget(request_id)
            if stream is not None:
                streams.append(stream)
        return streams

    def _engine_dead(self) -> list[Stream]:
        """The engine is dead: hand over every request's stream."""
        streams, self._streams = self._streams, {}
        return list(streams.values())

    def _core_replaced(self, core: int) -> None:
        """A new core serves as `core`: it has no step's snapshot yet."""
        self._last_stats[core] = _NO_STATS

    def _forget(self, request_id: str) -> Output | None:
        """Drop an aborted request's output state and its core's load (lock held), counting
        its final output; returns that output."""
        final = self._output_processor.abort(request_id)
        self._cores.forget(request_id)
        if final is not None:
            self._counters.count_finished(final)
        return final
