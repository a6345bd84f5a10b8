"""The scheduler: each step, how many tokens of which request to compute.

There is no prefill or decode mode. Running requests are served first (a decode needs
one token, a partly computed prompt the rest of it), then waiting ones, under a token
budget and a sequence limit; prompts longer than the budget are computed in chunks.
When the KV cache runs out, the lowest-ranked running request (the newest under FCFS)
is preempted: its blocks are freed and it is recomputed later, producing the same output.

A step may be scheduled before the previous step's sampled tokens reach the host (the
engine core overlaps host and device work): a request whose token is in flight is
decoded at that token's position with a placeholder id the model runner fills in on the
device. If the arriving token finishes the request, the step already scheduled for it
computes one token that is thrown away.

A pooling request is a prompt and nothing more: the step that computes its last prompt
token pools its hidden states (`sample` is set), and that output finishes it.

A request with a grammar waits until the grammar is compiled (others are scheduled past
it); each token it outputs advances its matcher, and the grammar's end (its stop token
accepted) finishes it.

Speculative decoding: a speculative request's decode step also computes the drafts the
proposer guesses from its tokens (when the budget and the KV cache have room for them);
its result brings the accepted drafts and one more token, appended one by one with the
stop checks of each. The positions of rejected drafts are computed again later (their
KV entries are overwritten) and the blocks only they used are freed.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

from pagoda.config import SchedulerConfig
from pagoda.engine.kv_cache_manager import KVCacheManager
from pagoda.engine.request import Request, RequestStatus
from pagoda.engine.scheduler_output import (
    EngineCoreOutput,
    ModelRunnerOutput,
    NewRequestData,
    ScheduledRequest,
    SchedulerOutput,
)

if TYPE_CHECKING:
    from pagoda.spec import DraftModelSlots, NgramProposer

logger = logging.getLogger(__name__)


class Scheduler:
    def __init__(self, config: SchedulerConfig, kv_cache: KVCacheManager, max_model_len: int,
                 *, stages: int = 1,
                 proposer: NgramProposer | DraftModelSlots | None = None,
                 speculate_up_to: int | None = None, max_loras: int | None = None):
        """`stages`: pipeline stages, each working on a step of its own. With one, a
        request whose token is in flight may be scheduled at that token's position (see
        above); with several, it waits for the token, and each step takes at most its
        share (1 / stages) of the requests, so that consecutive steps hold different
        requests and every stage has work. `proposer`: the drafts of speculative
        requests (a draft model's: placeholders the worker fills), in steps that start
        with at most `speculate_up_to` running requests (None: every step). `max_loras`: the most
        distinct LoRA adapters in one step (None: LoRA is off); requests for others wait (a
        running one skips the step; a waiting one, and those behind it, are not admitted)."""
        self.config = config
        self.max_loras = max_loras
        self.stages = stages
        self.placeholders = stages == 1
        self.kv_cache = kv_cache
        self.max_model_len = max_model_len
        self.requests: dict[str, Request] = {}
        self.waiting: list[Request] = []
        self.running: list[Request] = []
        self.proposer = proposer
        self.speculate_up_to = speculate_up_to
        self.num_preemptions = 0
        self.num_draft_tokens = 0
        """Drafts proposed since start-up (all requests)."""
        self.num_accepted_tokens = 0
        """Of those, the ones accepted."""
        self._finished_ids: list[str] = []
        self._new_to_workers: set[str] = set()

    # ---- queue management -------------------------------------------------------------

    def _rank(self, request: Request) -> tuple[float, ...]:
        """Sort key: lower is served first (and preempted last)."""
        if self.config.scheduling_policy == "priority":
            return (request.priority, request.arrival_time)
        return (request.arrival_time,)

    def add_request(self, request: Request) -> None:
        if request.request_id in self.requests:
            raise ValueError(f"request id {request.request_id!r} is already in use")
        self.requests[request.request_id] = request
        self.waiting.append(request)
        self.waiting.sort(key=self._rank)

    def finish_requests(self, request_ids: Iterable[str], status: RequestStatus) -> None:
        """Finish (e.g. abort) requests now, freeing their blocks at once."""
        for request_id in request_ids:
            request = self.requests.get(request_id)
            if request is None or request.is_finished:
                continue
            self._finish(request, status)

    def _finish(self, request: Request, status: RequestStatus) -> None:
        if request.status == RequestStatus.RUNNING:
            self.running.remove(request)
        elif request in self.waiting:  # preempted while its last token was in flight
            self.waiting.remove(request)
        request.status = status
        self.kv_cache.free(request)
        self._finished_ids.append(request.request_id)
        del self.requests[request.request_id]

    @property
    def num_running(self) -> int:
        return len(self.running)

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    def has_unfinished_requests(self) -> bool:
        return bool(self.waiting or self.running)

    # ---- scheduling -------------------------------------------------------------------

    def _preempt(self, request: Request) -> None:
        self.running.remove(request)
        self.kv_cache.free(request)
        request.status = RequestStatus.PREEMPTED
        request.num_computed_tokens = 0
        request.draft_token_ids = []
        request.num_preemptions += 1
        self.num_preemptions += 1
        self._finished_ids.append(request.request_id)  # workers drop its state
        self.waiting.append(request)
        self.waiting.sort(key=self._rank)

    def _tokens_wanted(self, request: Request, budget: int) -> int:
        if request.num_inflight_tokens and (
            not self.placeholders
            or request.num_output_tokens + request.num_inflight_tokens >= request.max_tokens
        ):
            return 0  # it waits for the token in flight, or that token (a pooled output) is its last
        remaining = request.num_tokens + request.num_inflight_tokens - request.num_computed_tokens
        return min(remaining, budget, self.max_model_len - request.num_computed_tokens)

    def _speculating(self) -> bool:
        """Whether this step proposes drafts: it does not start with more running requests
        than `speculate_up_to` (`_drafts` checks the rest)."""
        return self.speculate_up_to is None or len(self.running) <= self.speculate_up_to

    def _drafts(self, request: Request, budget: int) -> list[int]:
        """The drafts to verify in a speculative request's decode step (its one new token
        is its last): as many as fit the budget, its max_tokens (the step outputs one
        more) and the context."""
        if (self.proposer is None or not request.speculative
                or request.num_computed_tokens != request.num_tokens - 1):
            return []
        limit = min(budget - 1, request.max_tokens - request.num_output_tokens - 1,
                    self.max_model_len - request.num_tokens)
        return self.proposer.propose(request.all_token_ids, limit, owner=request)

    def _max_seqs_per_step(self) -> int:
        if self.stages == 1:
            return self.config.max_num_seqs
        share = -(-(len(self.running) + len(self.waiting)) // self.stages)
        return max(1, min(share, self.config.max_num_seqs))

    def _adapter_fits(self, request: Request, loras: set[int]) -> bool:
        """Whether `request` may join a step whose adapters so far are `loras`."""
        lora = request.lora_id
        return (lora == 0 or lora in loras or self.max_loras is None
                or len(loras - {0}) < self.max_loras)

    def schedule(self) -> SchedulerOutput:
        budget = self.config.max_num_batched_tokens
        max_seqs = self._max_seqs_per_step()
        planned: dict[str, int] = {}
        preempted = False
        loras: set[int] = set()
        speculating = self._speculating()

        for request in list(self.running):
            if budget <= 0 or len(planned) >= max_seqs:
                break
            if request.status != RequestStatus.RUNNING:
                continue  # preempted earlier in this loop
            if not self._adapter_fits(request, loras):
                continue
            num_new = self._tokens_wanted(request, budget)
            if num_new <= 0:
                continue
            drafts = self._drafts(request, budget) if speculating else []
            if drafts and self.kv_cache.allocate_slots(request, num_new + len(drafts)):
                request.draft_token_ids = drafts
                planned[request.request_id] = num_new + len(drafts)
                budget -= num_new + len(drafts)
                loras.add(request.lora_id)
                continue
            while not self.kv_cache.allocate_slots(request, num_new):
                victim = max(self.running, key=self._rank)
                if victim.request_id in planned:
                    budget += planned.pop(victim.request_id)
                self._preempt(victim)
                preempted = True
                if victim is request:
                    break
            else:
                planned[request.request_id] = num_new
                budget -= num_new
                loras.add(request.lora_id)

        if not preempted:
            budget = self._schedule_waiting(planned, budget, max_seqs, loras)
        return self._build_output(planned)

    def _schedule_waiting(self, planned: dict[str, int], budget: int, max_seqs: int,
                          loras: set[int]) -> int:
        for request in list(self.waiting):
            if (budget <= 0 or len(self.running) >= self.config.max_num_seqs
                    or len(planned) >= max_seqs):
                break
            if request.grammar is not None and not request.grammar.ready:
                continue  # still compiling (a failed one is finished by the engine core)
            parent = request.fork_of
            if parent is not None and parent.status == RequestStatus.RUNNING and (
                parent.num_computed_tokens < parent.num_prompt_tokens
            ):
                continue  # wait to share the first sibling's prompt blocks
            if not self._adapter_fits(request, loras):
                break  # first come, first served: no later request passes it (they would
                # keep its adapter out as long as requests of the others came)
            computed = self.kv_cache.find_computed_blocks(request)
            num_cached = len(computed) * self.kv_cache.block_size
            num_new = min(request.num_tokens - num_cached, budget)
            if not self.config.enable_chunked_prefill and num_new < request.num_tokens - num_cached:
                break
            if not self.kv_cache.allocate_slots(request, num_new, computed):
                break
            loras.add(request.lora_id)
            self.waiting.remove(request)
            self.running.append(request)
            if request.num_cached_tokens < 0:
                request.num_cached_tokens = num_cached
                self.kv_cache.stats.record(request.num_tokens, num_cached)
            request.status = RequestStatus.RUNNING
            request.num_computed_tokens = num_cached
            self._new_to_workers.add(request.request_id)
            planned[request.request_id] = num_new
            budget -= num_new
        return budget

    def _build_output(self, planned: dict[str, int]) -> SchedulerOutput:
        out = SchedulerOutput(finished_request_ids=self._finished_ids)
        self._finished_ids = []
        for request in self.running:
            num_new = planned.get(request.request_id)
            if not num_new:
                continue
            start = request.num_computed_tokens
            drafts = request.draft_token_ids
            if request.request_id in self._new_to_workers:
                out.new_requests.append(NewRequestData(
                    request.request_id, request.prompt_token_ids, list(request.output_token_ids),
                    request.sampling_params, request.eos_token_id, request.pooling_params,
                    request.token_type_ids, request.lora_request,
                ))
            out.scheduled.append(ScheduledRequest(
                request_id=request.request_id,
                num_computed_tokens=start,
                token_ids=request.token_ids_between(start, start + num_new - len(drafts)) + drafts,
                block_ids=self.kv_cache.block_ids(request.request_id),
                sample=start + num_new - len(drafts)
                == request.num_tokens + request.num_inflight_tokens,
                draft_token_ids=list(drafts),
            ))
            request.num_computed_tokens = start + num_new
            if out.scheduled[-1].sample:
                request.num_inflight_tokens += 1
        self._new_to_workers.clear()
        return out

    # ---- results ----------------------------------------------------------------------

    def update_from_output(
        self, scheduled: SchedulerOutput, result: ModelRunnerOutput
    ) -> list[EngineCoreOutput]:
        """Append sampled tokens, apply token-level stop conditions, free what finished."""
        outputs = []
        for item in scheduled.scheduled:
            request = self.requests.get(item.request_id)
            if request is None:
                continue  # finished or aborted while the step ran
            pooled = result.pooled.get(item.request_id)
            if pooled is not None:  # its prompt was computed (even if preempted since)
                outputs.append(self._finish_pooled(request, pooled))
                continue
            prompt_lp = result.prompt_logprobs.get(item.request_id, [])
            token = result.sampled.get(item.request_id)
            if token is None:
                if prompt_lp and request.status == RequestStatus.RUNNING:
                    outputs.append(EngineCoreOutput(item.request_id, [],
                                                    new_prompt_logprobs=prompt_lp))
                continue
            if not request.num_inflight_tokens:
                continue  # preempted and rescheduled since: this token will be recomputed
            request.num_inflight_tokens -= 1
            tokens = result.verified.get(item.request_id, [token])
            new, status = self._append(request, tokens)
            num_drafts = len(item.draft_token_ids)
            if num_drafts:
                self._after_verification(request, num_drafts, len(tokens) - 1)
            logprobs = result.logprobs.get(item.request_id)
            outputs.append(EngineCoreOutput(
                item.request_id, new,
                new_logprobs=[logprobs] if logprobs else [],
                new_prompt_logprobs=prompt_lp,
                finish_reason=status.finish_reason if status else None,
                stop_reason=request.stop_reason,
                num_cached_tokens=max(request.num_cached_tokens, 0),
                num_draft_tokens=num_drafts,
                num_accepted_tokens=len(tokens) - 1,
            ))
            if status is not None:
                self._finish(request, status)
        return outputs

    def _append(self, request: Request, tokens: list[int]
                ) -> tuple[list[int], RequestStatus | None]:
        """Append the step's tokens one by one until one finishes the request: the tokens
        appended, and the status that finished it (None: running on)."""
        for i, token in enumerate(tokens):
            request.output_token_ids.append(token)
            status = self._check_stop(request, token)
            if request.grammar is not None:
                status = self._advance_grammar(request, token) or status
            if request.thinking is not None:
                request.thinking.observe(request.output_token_ids)
            if status is not None:
                return tokens[: i + 1], status
        return tokens, None

    def _after_verification(self, request: Request, num_drafts: int, num_accepted: int) -> None:
        """Count the drafts, and forget the KV of the rejected ones: their positions are
        computed again, their blocks freed."""
        request.draft_token_ids = []
        request.num_draft_tokens += num_drafts
        request.num_accepted_tokens += num_accepted
        self.num_draft_tokens += num_drafts
        self.num_accepted_tokens += num_accepted
        request.num_computed_tokens = min(request.num_computed_tokens, request.num_tokens - 1)
        self.kv_cache.trim(request)

    def _finish_pooled(self, request: Request, pooled: list[float]) -> EngineCoreOutput:
        """A pooling request's output arrived: it is finished."""
        status = RequestStatus.FINISHED_STOPPED
        self._finish(request, status)
        return EngineCoreOutput(request.request_id, [], finish_reason=status.finish_reason,
                                num_cached_tokens=max(request.num_cached_tokens, 0),
                                pooled=pooled)

    @staticmethod
    def _advance_grammar(request: Request, token: int) -> RequestStatus | None:
        """Feed the token to the request's matcher: stopped once the grammar ends."""
        assert request.grammar is not None
        if not request.grammar.accept(token):
            logger.error("request %s: its grammar rejects the sampled token %d; finishing it",
                         request.request_id, token)
            return RequestStatus.FINISHED_ABORTED
        return RequestStatus.FINISHED_STOPPED if request.grammar.terminated else None

    def _check_stop(self, request: Request, token: int) -> RequestStatus | None:
        params = request.sampling_params
        if request.num_output_tokens >= (params.min_tokens or 0):
            if token == request.eos_token_id and not params.ignore_eos:
                return RequestStatus.FINISHED_STOPPED
            if token in (params.stop_token_ids or ()):
                request.stop_reason = token
                return RequestStatus.FINISHED_STOPPED
        if request.num_output_tokens >= request.max_tokens:
            return RequestStatus.FINISHED_LENGTH
        if request.num_tokens >= self.max_model_len:
            return RequestStatus.FINISHED_LENGTH
        return None
