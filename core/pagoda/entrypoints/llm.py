"""`LLM`: offline batch generation in one process."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tqdm.auto import tqdm

from pagoda.config import EngineConfig
from pagoda.frontend.llm_engine import LLMEngine
from pagoda.inputs import PromptInput
from pagoda.outputs import RequestOutput
from pagoda.sampling_params import SamplingParams

Message = dict[str, Any]


class LLM:
    """Generate text for batches of prompts.

    >>> llm = LLM()  # the embedded SmolLM2-135M-Instruct on the best device
    >>> llm.chat([{"role": "user", "content": "Hi!"}])[0].outputs[0].text
    """

    def __init__(self, model: str | None = None, **options: Any):
        """`model`: HF directory, .gguf file, hub id or bundled name (None: the embedded
        default). `options`: any leaf field of EngineConfig by name (device, dtype,
        max_model_len, max_num_seqs, gpu_memory_utilization, enforce_eager, ...: the
        options `pagoda serve --help` lists); an unknown one is a TypeError."""
        config = EngineConfig.from_kwargs(model=model, **options)
        self.engine = LLMEngine(config)

    def get_tokenizer(self) -> Any:
        return self.engine.tokenizer

    def generate(
        self,
        prompts: PromptInput | Sequence[PromptInput],
        sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
        *,
        use_tqdm: bool = True,
        priority: Sequence[int] | None = None,
    ) -> list[RequestOutput]:
        """Generate for each prompt (text, token ids, or a dict); outputs in input order."""
        if isinstance(prompts, (str, dict)) or (
            isinstance(prompts, list) and prompts and isinstance(prompts[0], int)
        ):
            prompts = [prompts]
        prompts = list(prompts)
        if sampling_params is None:
            sampling_params = self.engine.default_sampling_params()
        if isinstance(sampling_params, SamplingParams):
            sampling_params = [sampling_params] * len(prompts)
        if len(sampling_params) != len(prompts):
            raise ValueError(f"got {len(sampling_params)} sampling_params for {len(prompts)} prompts")
        if priority is not None and len(priority) != len(prompts):
            raise ValueError(f"got {len(priority)} priorities for {len(prompts)} prompts")

        order: dict[str, int] = {}
        try:
            for i, (prompt, params) in enumerate(zip(prompts, sampling_params)):
                request_id = self.engine.next_request_id()
                self.engine.add_request(request_id, prompt, params,
                                        priority[i] if priority is not None else 0,
                                        final_only=True)
                order[request_id] = i
            return self._run(order, use_tqdm and len(prompts) > 1)
        except BaseException:
            for request_id in order:
                self.engine.abort_request(request_id)
            raise

    def _run(self, order: dict[str, int], show_progress: bool) -> list[RequestOutput]:
        results: list[RequestOutput | None] = [None] * len(order)
        bar = tqdm(total=len(order), desc="Generating", unit="req", disable=not show_progress)
        with bar:
            while self.engine.has_unfinished_requests():
                for output in self.engine.step():
                    if output.finished and output.request_id in order:
                        results[order[output.request_id]] = output
                        bar.update(1)
        missing = [rid for rid, i in order.items() if results[i] is None]
        if missing:
            raise RuntimeError(f"requests {missing} ended without a final output")
        return results  # type: ignore[return-value]

    def chat(
        self,
        messages: list[Message] | Sequence[list[Message]],
        sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
        *,
        use_tqdm: bool = True,
        chat_template: str | None = None,
        add_generation_prompt: bool = True,
        chat_template_kwargs: dict[str, Any] | None = None,
    ) -> list[RequestOutput]:
        """Apply the chat template to one conversation or a list of them, then generate."""
        conversations = [messages] if messages and isinstance(messages[0], dict) else messages
        prompts = [
            {"prompt_token_ids": self.apply_chat_template(
                conv, chat_template=chat_template, add_generation_prompt=add_generation_prompt,
                **(chat_template_kwargs or {}))}
            for conv in conversations
        ]
        return self.generate(prompts, sampling_params, use_tqdm=use_tqdm)

    def apply_chat_template(self, conversation: list[Message], **kwargs: Any) -> list[int]:
        tokenizer = self.engine.tokenizer
        if kwargs.get("chat_template") is None and tokenizer.chat_template is None:
            raise ValueError("this model has no chat template; pass chat_template=...")
        ids = tokenizer.apply_chat_template(conversation, tokenize=True, **kwargs)
        if isinstance(ids, dict) or hasattr(ids, "input_ids"):  # BatchEncoding in transformers 5
            ids = ids["input_ids"]
        return list(ids)
