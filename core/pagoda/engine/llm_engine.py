"""The synchronous engine: front-end processing around an in-process engine core."""

from __future__ import annotations

import itertools
import logging
from typing import Any

from pagoda.config import EngineConfig
from pagoda.engine.core import EngineCore
from pagoda.engine.input_processor import InputProcessor, PromptInput
from pagoda.engine.output_processor import OutputProcessor
from pagoda.engine.request import RequestStatus
from pagoda.model_source import ModelSource, resolve_model
from pagoda.outputs import RequestOutput
from pagoda.sampling_params import SamplingParams

logger = logging.getLogger(__name__)


def context_length(hf_config: Any) -> int:
    """The longest sequence the model was built for, from its HF config."""
    for key in ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length"):
        value = getattr(hf_config, key, None)
        if isinstance(value, int) and value > 0:
            return value
    raise ValueError("cannot tell the model's context length from its config; set max_model_len")


def derive_max_model_len(hf_config: Any, requested: int | None) -> int:
    limit = context_length(hf_config)
    if requested is None:
        return limit
    if requested > limit:
        raise ValueError(
            f"max_model_len={requested} is larger than the model's context length ({limit})"
        )
    return requested


class LLMEngine:
    def __init__(self, config: EngineConfig):
        self.config = config
        self.source: ModelSource = resolve_model(config.model.model)
        self.hf_config = self.source.hf_config()
        self.tokenizer = self.source.tokenizer(config.model.tokenizer)
        if config.model.chat_template:
            self.tokenizer.chat_template = config.model.chat_template
        config.model.max_model_len = derive_max_model_len(self.hf_config,
                                                          config.model.max_model_len)
        self.core = EngineCore(config, self.source, self.hf_config, config.model.max_model_len)
        self.max_model_len = self.core.max_model_len
        eos = getattr(self.hf_config, "eos_token_id", None)
        eos = eos[0] if isinstance(eos, list) else eos
        if eos is None:
            eos = self.tokenizer.eos_token_id
        self.eos_token_id: int | None = eos
        self.input_processor = InputProcessor(self.tokenizer, self.max_model_len,
                                              self.hf_config.vocab_size, eos)
        self.output_processor = OutputProcessor(self.tokenizer)
        self._ids = itertools.count()
        self.generation_defaults = (
            self.source.generation_defaults() if config.model.generation_config == "auto" else {}
        )

    def default_sampling_params(self) -> SamplingParams:
        """SamplingParams with the model's generation_config.json defaults applied."""
        return SamplingParams(**self.generation_defaults)

    def next_request_id(self) -> str:
        return str(next(self._ids))

    def add_request(self, request_id: str, prompt: PromptInput, params: SamplingParams,
                    priority: int = 0) -> None:
        if self.output_processor.has_request(request_id):
            raise ValueError(f"request id {request_id!r} is already in use")
        processed = self.input_processor.tokenize(prompt)
        requests = self.input_processor.make_requests(request_id, processed, params, priority)
        self.output_processor.add(request_id, processed, requests)
        for request in requests:
            self.core.add_request(request)

    def abort_request(self, request_id: str) -> RequestOutput | None:
        self.core.abort_requests(self.output_processor.child_ids(request_id))
        return self.output_processor.abort(request_id)

    def has_unfinished_requests(self) -> bool:
        return self.core.has_unfinished_requests()

    def step(self) -> list[RequestOutput]:
        outputs, stopped = self.output_processor.process(self.core.step())
        if stopped:
            self.core.scheduler.finish_requests(stopped, RequestStatus.FINISHED_STOPPED)
        return outputs

    def shutdown(self) -> None:
        self.core.shutdown()
