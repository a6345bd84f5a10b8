"""Runs one scheduled step on an XLA device in static shapes; samples on the host.

Each step is padded to its (tokens, sequences, block-table width) bucket, so the forward
pass, the KV cache writes and the logits of every sequence's last token form one XLA
program that is compiled once per bucket and replayed after. The logits
([sequences bucket, vocab] float32) then go to the host, where core's sampler picks the
tokens: every sampling parameter, seed and logprob works as on the CPU platform, for one
device-to-host copy per step.
"""

from __future__ import annotations

import torch
import torch_xla
from torch import nn

from pagoda.attention import AttentionMetadataBuilder
from pagoda.engine.scheduler_output import ModelRunnerOutput, SchedulerOutput
from pagoda.outputs import TokenLogprobs
from pagoda.sample import compute_prompt_logprobs
from pagoda.worker.model_runner import ModelRunner
from pagoda_tpu.shapes import StepShapes
from pagoda_tpu.step_padding import PaddedStep, pad_step

HOST = torch.device("cpu")


class XlaModelRunner(ModelRunner):
    """Core's runner (request states, sampler) with the model on `xla_device`; the
    inherited `device`, where sampling happens, is the host."""

    def __init__(
        self,
        model: nn.Module,
        kv_caches: list[torch.Tensor],
        builder: AttentionMetadataBuilder,
        block_size: int,
        vocab_size: int,
        xla_device: torch.device,
        shapes: StepShapes,
        seed: int = 0,
    ):
        super().__init__(model, kv_caches, builder, block_size, vocab_size, HOST, seed=seed)
        self.xla_device = xla_device
        self.shapes = shapes

    @torch.no_grad()  # not inference_mode: XLA's in-place cache writes need version counters
    def execute_model(self, step: SchedulerOutput) -> ModelRunnerOutput:
        self._update_states(step)
        result = ModelRunnerOutput()
        if step.is_empty:
            return result
        padded = pad_step(step.scheduled, self.block_size, self.shapes, self.xla_device)
        metadata = self.builder.build(padded.metadata)
        hidden = self.model(padded.input_ids, padded.positions, self.kv_caches, metadata)
        logits = self.model.compute_logits(hidden[padded.last_token_rows])
        torch_xla.sync()  # run the step's program: forward, cache writes, logits
        self._sample(step, logits.to(HOST), result)
        self._add_prompt_logprobs(step, padded, hidden, result)
        return result

    def _sample(self, step: SchedulerOutput, logits: torch.Tensor,
                result: ModelRunnerOutput) -> None:
        """Sample the requests that reached their last token, from host logits [B, V]."""
        rows = [i for i, item in enumerate(step.scheduled) if item.sample]
        if not rows:
            return
        ids = [step.scheduled[i].request_id for i in rows]
        states = [self.states[request_id] for request_id in ids]
        out = self.sampler(logits[rows], states)
        lp = None
        if out.logprobs is not None:
            lp = out.logprobs.tolists([s.params.logprobs or 0 for s in states])
        for i, (request_id, state, token) in enumerate(
                zip(ids, states, out.sampled_token_ids.tolist())):
            state.output_token_ids.append(token)
            result.sampled[request_id] = token
            if lp is not None and state.params.logprobs is not None:
                result.logprobs[request_id] = TokenLogprobs(
                    lp.token_ids[i], lp.logprobs[i], lp.ranks[i])

    def _add_prompt_logprobs(self, step: SchedulerOutput, padded: PaddedStep,
                             hidden: torch.Tensor, result: ModelRunnerOutput) -> None:
        """Logprobs of this step's prompt tokens, for requests that asked; the rows are
        padded to a token bucket too, so these small programs compile once per bucket."""
        for want in self._prompt_logprob_rows(step, padded.query_starts):
            n = len(want.rows)
            if not n:
                result.prompt_logprobs[want.request_id] = []
                continue
            rows = want.rows + [0] * (self.shapes.tokens(n) - n)
            index = torch.tensor(rows).to(self.xla_device)
            logits = self.model.compute_logits(hidden[index]).to(HOST)[:n]
            plp = compute_prompt_logprobs(logits, torch.tensor(want.targets), want.k).tolists()
            result.prompt_logprobs[want.request_id] = [
                TokenLogprobs(ids, lps, rank)
                for ids, lps, rank in zip(plp.token_ids, plp.logprobs, plp.ranks)
            ]
