"""The synchronous engine: front-end processing around an in-process engine core."""

from __future__ import annotations

import itertools
import logging

from pagoda.config import EngineConfig
from pagoda.engine.core import EngineCore
from pagoda.engine.request import RequestStatus
from pagoda.frontend.input_processor import ProcessedPrompt
from pagoda.frontend.model_frontend import ModelFrontend
from pagoda.frontend.output_processor import OutputProcessor
from pagoda.inputs import PromptInput
from pagoda.lora.request import LoRARequest
from pagoda.model_source import ModelSource
from pagoda.outputs import PoolingRequestOutput, RequestOutput
from pagoda.pooling import PoolerSpec
from pagoda.pooling_params import PoolingParams
from pagoda.sampling_params import SamplingParams

logger = logging.getLogger(__name__)


class LLMEngine:
    def __init__(self, config: EngineConfig):
        if config.parallel.data_parallel_size > 1:
            raise ValueError("data_parallel_size > 1 runs engine cores in processes of their "
                             "own behind one front end: serve the model (pagoda serve) or "
                             "use AsyncLLM")
        self.config = config
        frontend = ModelFrontend.load(config)
        self.frontend = frontend
        self.source: ModelSource = frontend.source
        self.hf_config = frontend.hf_config
        self.tokenizer = frontend.tokenizer
        self.eos_token_id = frontend.eos_token_id
        self.generation_defaults = frontend.generation_defaults
        self.core = EngineCore(config, self.source, self.hf_config, config.model.max_model_len,
                               load_tokenizer=lambda: frontend.tokenizer)
        self.max_model_len = self.core.max_model_len
        self.pooler: PoolerSpec | None = self.core.info["pooler"]
        """What the model outputs if it is a pooling model; None: it generates."""
        self.input_processor = frontend.input_processor(self.max_model_len, self.pooler,
                                                        config.lora, self.core.add_lora)
        self.output_processor = OutputProcessor(self.tokenizer)
        self._ids = itertools.count()

    def default_sampling_params(self) -> SamplingParams:
        """SamplingParams with the model's generation_config.json defaults applied."""
        return self.frontend.default_sampling_params()

    def next_request_id(self) -> str:
        return str(next(self._ids))

    def add_request(self, request_id: str, prompt: PromptInput, params: SamplingParams,
                    priority: int = 0, final_only: bool = False,
                    lora_request: LoRARequest | None = None) -> None:
        """Queue a request (with `lora_request`'s adapter, if any); `step()` reports it
        every step, or only once finished with `final_only`."""
        if self.output_processor.has_request(request_id):
            raise ValueError(f"request id {request_id!r} is already in use")
        processed = self.input_processor.tokenize(prompt)
        requests = self.input_processor.make_requests(request_id, processed, params, priority,
                                                      lora_request=lora_request)
        self.output_processor.add(request_id, processed, requests, final_only)
        for request in requests:
            self.core.add_request(request)

    def add_pooling_request(self, request_id: str, prompt: PromptInput | ProcessedPrompt,
                            params: PoolingParams, priority: int = 0) -> None:
        """Queue a pooling model's request; `step()` reports it once, finished."""
        if self.output_processor.has_request(request_id):
            raise ValueError(f"request id {request_id!r} is already in use")
        processed = (prompt if isinstance(prompt, ProcessedPrompt)
                     else self.input_processor.tokenize(prompt))
        request = self.input_processor.make_pooling_request(request_id, processed, params,
                                                            priority)
        self.output_processor.add_pooling(request_id, processed)
        self.core.add_request(request)

    def abort_request(self, request_id: str) -> RequestOutput | PoolingRequestOutput | None:
        self.core.abort_requests(self.output_processor.child_ids(request_id))
        return self.output_processor.abort(request_id)

    def has_unfinished_requests(self) -> bool:
        return self.core.has_unfinished_requests()

    def step(self) -> list[RequestOutput | PoolingRequestOutput]:
        outputs, stopped = self.output_processor.process(self.core.step())
        if stopped:
            self.core.scheduler.finish_requests(stopped, RequestStatus.FINISHED_STOPPED)
        return outputs

    def shutdown(self) -> None:
        self.core.shutdown()
