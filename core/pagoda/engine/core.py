"""The engine core: scheduler + KV cache manager + executor, one step at a time.

It knows token ids only; tokenizing, detokenizing and stop strings belong to the front
end. In the server it runs in its own process (see `pagoda.engine.core_process`).

On a platform whose device runs asynchronously, steps overlap: step N+1 is scheduled and
launched before step N's sampled tokens are read back, so the host's Python work hides
behind the device's. A step holding a request that needs its tokens on the host to sample
the next (penalties, bad words) is read back before anything else is scheduled.

Structured outputs: a request's grammar compiles on a thread of `Grammars` while other
requests run; each step's bitmask of allowed tokens is filled from the matchers of the
scheduled requests that sample (and the forced tokens of spent thinking budgets). It
travels with the step when nothing is in flight; else the step is launched without it
(`grammar_bitmask_later`: the forward runs) and gets it once the step before has been
read back and has advanced the matchers, so that the host fills it during the forward.

Speculative decoding (`SpeculativeConfig`): the scheduler proposes drafts for the requests
whose parameters allow it (`pagoda.spec.can_speculate`); their steps are read back before
the next is scheduled, since drafts are proposed from their tokens.
"""

from __future__ import annotations

import gc
import logging
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any

from pagoda.config import EngineConfig, SchedulerConfig
from pagoda.engine.kv_cache_manager import KVCacheManager
from pagoda.engine.request import Request, RequestStatus
from pagoda.engine.scheduler import Scheduler
from pagoda.engine.scheduler_output import EngineCoreOutput, SchedulerOutput, StepResult
from pagoda.engine.thinking import ThinkingBudget
from pagoda.lora.request import LoRARequest
from pagoda.model_source import ModelSource
from pagoda.outputs import EngineStats
from pagoda.platforms import resolve_platform
from pagoda.plugins.lazy import load_target
from pagoda.plugins.manager import get_registries, warn_about_failed_plugins
from pagoda.spec import DraftModelSlots, NgramProposer, can_speculate
from pagoda.structured.engine import GrammarBitmask, Grammars

logger = logging.getLogger(__name__)


@dataclass
class _InFlightStep:
    scheduled: SchedulerOutput
    result: StepResult
    blocks_overlap: bool
    """Some request in it needs this step's tokens before its next step is scheduled."""
    awaits_bitmask: bool = False
    """Launched without its token bitmask, which it gets when the step before is read."""


class EngineCore:
    def __init__(self, config: EngineConfig, source: ModelSource, hf_config: Any,
                 max_model_len: int, data_parallel_rank: int = 0,
                 load_tokenizer: Callable[[], Any] | None = None):
        """`load_tokenizer`: returns the front end's tokenizer (grammars need one, called
        when the first grammar compiles); None: the core loads its own then."""
        regs = get_registries()
        warn_about_failed_plugins(regs)
        platform = resolve_platform(config.device)
        executor_name = config.distributed_executor_backend or (
            "mp" if config.parallel.world_size > 1 else platform.executor)
        executor_cls = load_target(regs.executors.get(executor_name).spec.executor)
        first_device = data_parallel_rank * config.parallel.world_size
        self.executor = executor_cls(config, platform.worker, first_device=first_device,
                                     source=source, hf_config=hf_config)

        block_size = config.cache.block_size
        self.num_blocks = self.executor.determine_num_kv_blocks()
        self.executor.initialize_cache(self.num_blocks)
        described = self.executor.collective_rpc("describe")[0]
        capacity = self.num_blocks * block_size
        if max_model_len > capacity:
            logger.warning("KV cache holds %d tokens, below the model's %d: max_model_len "
                           "lowered to %d", capacity, max_model_len, capacity)
            max_model_len = capacity
        scheduler_config, prefix_caching = config.scheduler, config.cache.enable_prefix_caching
        if described["whole_prompt_reason"]:
            scheduler_config, max_model_len = _whole_prompts(
                scheduler_config, max_model_len, described["whole_prompt_reason"],
                prefix_caching)
            prefix_caching = False
        self.max_model_len = max_model_len
        self.kv_cache = KVCacheManager(self.num_blocks, block_size, prefix_caching)
        stages = config.parallel.pipeline_parallel_size
        # Pipeline stages take a step each: a request waits for its token before its next
        # step (the first stage never holds the last stage's tokens).
        spec = config.speculative
        if spec.speculative_method is not None and described["runner"] == "pooling":
            self.executor.shutdown()
            raise ValueError("speculative_method: the model pools (a pooling model generates "
                             "no tokens to speculate on)")
        self.proposer: NgramProposer | DraftModelSlots | None = None
        if spec.speculative_method == "ngram":
            self.proposer = NgramProposer(spec.num_speculative_tokens, spec.prompt_lookup_min,
                                          spec.prompt_lookup_max)
        elif spec.speculative_method == "draft":  # the worker's draft model fills them
            self.proposer = DraftModelSlots(spec.num_speculative_tokens)
        self.scheduler = Scheduler(scheduler_config, self.kv_cache, max_model_len,
                                   stages=stages, proposer=self.proposer,
                                   speculate_up_to=spec.speculative_disable_by_batch_size,
                                   max_loras=config.lora.max_loras
                                   if config.lora.enable_lora else None)
        overlap = config.scheduler.async_scheduling
        if overlap and not platform.supports_async_scheduling:
            raise ValueError(f"async_scheduling: platform {platform.name!r} cannot overlap "
                             "steps (its model runner needs every input token on the host)")
        if overlap is None:
            overlap = platform.executes_asynchronously and platform.supports_async_scheduling
        self.async_scheduling = overlap
        self.depth = stages - 1 if stages > 1 else int(overlap)
        """Steps left in flight when `step` returns (one more runs while it waits)."""
        self._in_flight: deque[_InFlightStep] = deque()
        self.grammars = Grammars(
            load_tokenizer or (lambda: source.tokenizer(config.model.tokenizer)),
            hf_config.vocab_size)
        self.info = {
            **described,
            "kv_cache_blocks": self.num_blocks,
            "kv_cache_tokens": capacity,
            "max_model_len": max_model_len,
            "async_scheduling": self.async_scheduling,
            "pipeline_parallel_size": stages,
        }
        # Start-up objects (the model, caches, graphs) live for the whole run: keep the
        # cyclic garbage collector from scanning them again on every collection.
        gc.collect()
        gc.freeze()

    def add_request(self, request: Request) -> None:
        params = request.sampling_params  # None: a pooling request
        if params is not None and params.structured_outputs is not None:
            stops = list(params.stop_token_ids)  # what may end the grammar, eos too even
            if request.eos_token_id is not None:  # with ignore_eos: the grammar has ended
                stops.append(request.eos_token_id)
            request.grammar = self.grammars.start(params.structured_outputs, stops)
        if params is not None and params.thinking_budget is not None:
            request.thinking = ThinkingBudget(params.thinking_budget,
                                              params.thinking_end_token_ids)
        request.speculative = self.proposer is not None and can_speculate(params)
        self.scheduler.add_request(request)

    def abort_requests(self, request_ids: Iterable[str]) -> None:
        self.scheduler.finish_requests(request_ids, RequestStatus.FINISHED_ABORTED)

    def has_unfinished_requests(self) -> bool:
        return bool(self._in_flight) or self.scheduler.has_unfinished_requests()

    def step(self) -> list[EngineCoreOutput]:
        """Schedule and launch a step, and report what each request produced in the step
        whose results arrived: this one, or the oldest of those in flight when steps
        overlap (`depth` of them stay in flight)."""
        outputs = []
        while self._in_flight and self._in_flight[-1].blocks_overlap:
            outputs += self._finish_oldest()
        launched = False
        if self.scheduler.has_unfinished_requests():
            outputs += self._finish_failed_grammars()
            scheduled = self.scheduler.schedule()
            constrained = self._constrained(scheduled)
            later = bool(constrained) and bool(self._in_flight)
            if later:
                scheduled.grammar_bitmask_later = True
            else:
                scheduled.grammar_bitmask = self._grammar_bitmask(constrained)
            if not scheduled.is_empty or scheduled.finished_request_ids:
                self._in_flight.append(_InFlightStep(
                    scheduled, self.executor.execute_model(scheduled),
                    self.scheduler.placeholders and any(
                        self.scheduler.requests[item.request_id].needs_host_tokens
                        for item in scheduled.scheduled if item.sample), later))
                launched = True
        if self._in_flight and (len(self._in_flight) > self.depth or not launched):
            outputs += self._finish_oldest()
        elif not launched and not outputs:
            self.grammars.wait(0.05)  # only grammars being compiled can be waiting
        return outputs

    def _constrained(self, scheduled: SchedulerOutput) -> list[Request]:
        """The requests that sample in `scheduled` with a grammar or a thinking budget
        (those finished since it was scheduled have no bitmask: their token is dropped)."""
        requests = self.scheduler.requests
        return [r for item in scheduled.scheduled if item.sample
                and (r := requests.get(item.request_id)) is not None and not r.is_finished
                and (r.grammar is not None or r.thinking is not None)]

    def _grammar_bitmask(self, constrained: list[Request]) -> GrammarBitmask | None:
        """The allowed tokens of `constrained`: their grammars', or a forced token."""
        grammars = [r for r in constrained if r.grammar is not None and not r.grammar.terminated]
        forced = {r.request_id: token for r in constrained
                  if (token := r.forced_token) is not None}
        if not grammars and not forced:
            return None
        return self.grammars.bitmask([r.request_id for r in grammars],
                                     [r.grammar for r in grammars], forced)

    def _finish_failed_grammars(self) -> list[EngineCoreOutput]:
        """Abort the waiting requests whose grammar failed to compile (the front end's
        check passed it, so this is the grammar engine's own failure: logged)."""
        if not self.grammars.take_new_failures():
            return []
        failed = [r for r in self.scheduler.waiting if r.grammar is not None and r.grammar.failed]
        for request in failed:
            logger.error("request %s: its grammar failed to compile (%s)", request.request_id,
                         request.grammar.error)
        self.scheduler.finish_requests([r.request_id for r in failed],
                                       RequestStatus.FINISHED_ABORTED)
        return [EngineCoreOutput(r.request_id, [], finish_reason="abort") for r in failed]

    def _finish_oldest(self) -> list[EngineCoreOutput]:
        step = self._in_flight.popleft()
        outputs = self.scheduler.update_from_output(step.scheduled, step.result.result())
        if self._in_flight and self._in_flight[0].awaits_bitmask:
            following = self._in_flight[0]
            following.awaits_bitmask = False
            self.executor.provide_token_bitmask(
                self._grammar_bitmask(self._constrained(following.scheduled)))
        return outputs

    def stats(self) -> EngineStats:
        s = self.kv_cache.stats
        sched = self.scheduler
        return EngineStats(sched.num_running, sched.num_waiting, self.kv_cache.usage,
                           s.queries, s.hits, sched.num_preemptions,
                           sched.num_draft_tokens, sched.num_accepted_tokens)

    def add_lora(self, lora: LoRARequest) -> str | None:
        """Read LoRA adapter `lora` into every worker's host memory, so that its first
        request does not wait for the disk; what is wrong with it, or None."""
        return next(filter(None, self.executor.collective_rpc("add_lora", (lora,))), None)

    def remove_lora(self, lora_int_id: int) -> None:
        """Drop the adapter's host copies (requests running with it keep its slot)."""
        self.executor.collective_rpc("remove_lora", (lora_int_id,))

    def reset_prefix_cache(self) -> bool:
        return self.kv_cache.reset_prefix_cache()

    def shutdown(self) -> None:
        self.grammars.shutdown()
        self.executor.shutdown()


def _whole_prompts(config: SchedulerConfig, max_model_len: int, reason: str,
                   prefix_caching: bool) -> tuple[SchedulerConfig, int]:
    """The scheduler config (and max_model_len) under which every prompt runs in one step:
    no chunked prefill, and no prompt longer than a step's token budget."""
    if config.enable_chunked_prefill or prefix_caching:
        logger.info("Chunked prefill and prefix caching are off: %s, so each prompt runs in "
                    "one step", reason)
    budget = config.max_num_batched_tokens
    if max_model_len > budget:
        logger.warning("A step holds %d tokens (max_num_batched_tokens), below the model's "
                       "%d: max_model_len lowered to %d (each prompt runs in one step)",
                       budget, max_model_len, budget)
        max_model_len = budget
    return replace(config, enable_chunked_prefill=False), max_model_len
