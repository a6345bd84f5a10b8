"""`LLM`: offline batch generation, embeddings and scores in one process."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from tqdm.auto import tqdm

from pagoda.config import EngineConfig
from pagoda.frontend.input_processor import ProcessedPrompt
from pagoda.frontend.llm_engine import LLMEngine
from pagoda.inputs import PromptInput
from pagoda.lora.request import LoRARequest
from pagoda.outputs import (
    EmbeddingOutput,
    EmbeddingRequestOutput,
    PoolingRequestOutput,
    RequestOutput,
    ScoringOutput,
    ScoringRequestOutput,
)
from pagoda.pooling import cosine_similarity, score_pairs
from pagoda.pooling_params import PoolingParams
from pagoda.sampling_params import SamplingParams

Message = dict[str, Any]


class LLM:
    """Generate text for batches of prompts, or (a pooling model) embed them and score
    text pairs.

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
        lora_request: LoRARequest | Sequence[LoRARequest | None] | None = None,
    ) -> list[RequestOutput]:
        """Generate for each prompt (text, token ids, or a dict); outputs in input order.
        `lora_request`: the LoRA adapter of every prompt, or one per prompt (None: the base
        model); the engine needs enable_lora."""
        prompts = _prompt_list(prompts)
        if sampling_params is None:
            sampling_params = self.engine.default_sampling_params()
        if isinstance(sampling_params, SamplingParams):
            sampling_params = [sampling_params] * len(prompts)
        if len(sampling_params) != len(prompts):
            raise ValueError(f"got {len(sampling_params)} sampling_params for {len(prompts)} prompts")
        if priority is not None and len(priority) != len(prompts):
            raise ValueError(f"got {len(priority)} priorities for {len(prompts)} prompts")
        if lora_request is None or isinstance(lora_request, LoRARequest):
            lora_request = [lora_request] * len(prompts)
        if len(lora_request) != len(prompts):
            raise ValueError(f"got {len(lora_request)} lora_requests for {len(prompts)} prompts")

        def add(i: int, request_id: str) -> None:
            self.engine.add_request(request_id, prompts[i], sampling_params[i],
                                    priority[i] if priority is not None else 0,
                                    final_only=True, lora_request=lora_request[i])

        return self._run_all(len(prompts), add, use_tqdm)  # type: ignore[return-value]

    def encode(
        self,
        prompts: PromptInput | Sequence[PromptInput | ProcessedPrompt],
        pooling_params: PoolingParams | None = None,
        *,
        use_tqdm: bool = True,
    ) -> list[PoolingRequestOutput]:
        """A pooling model's raw output for each prompt (an embedding, or a tokenized text
        pair's score); outputs in input order. See `embed` and `score`."""
        prompt_list = _prompt_list(prompts)
        params = pooling_params or PoolingParams()

        def add(i: int, request_id: str) -> None:
            self.engine.add_pooling_request(request_id, prompt_list[i], params)

        return self._run_all(len(prompt_list), add, use_tqdm)  # type: ignore[return-value]

    def embed(
        self,
        prompts: PromptInput | Sequence[PromptInput],
        pooling_params: PoolingParams | None = None,
        *,
        use_tqdm: bool = True,
    ) -> list[EmbeddingRequestOutput]:
        """Each prompt's embedding (text, token ids, or a dict), in input order, pooled and
        normalized as the model says (`PoolingParams.dimensions` shortens a Matryoshka
        model's).

        >>> llm = LLM("path/to/all-MiniLM-L6-v2")
        >>> llm.embed(["Hello!"])[0].outputs.embedding  # 384 floats
        """
        outputs = self.encode(prompts, pooling_params or PoolingParams(), use_tqdm=use_tqdm)
        return [EmbeddingRequestOutput(o.request_id, o.prompt, o.prompt_token_ids,
                                       EmbeddingOutput(_data(o))) for o in outputs]

    def score(
        self,
        text_1: str | Sequence[str],
        text_2: str | Sequence[str],
        *,
        use_tqdm: bool = True,
    ) -> list[ScoringRequestOutput]:
        """The relevance score of each pair: one text_1 against each text_2, or text_1[i]
        against text_2[i]. A cross-encoder reads each pair as one input; an embedding
        model scores the cosine similarity of the two texts' embeddings."""
        pairs = score_pairs(text_1, text_2)
        pooler = self.engine.pooler
        if pooler is not None and pooler.task == "score":
            tokenize = self.engine.input_processor.tokenize_pair
            outputs = self.encode([tokenize(a, b) for a, b in pairs],
                                  PoolingParams(task="score"), use_tqdm=use_tqdm)
            return [ScoringRequestOutput(o.request_id, o.prompt_token_ids,
                                         ScoringOutput(_data(o)[0])) for o in outputs]
        texts = list(dict.fromkeys(text for pair in pairs for text in pair))
        embedded = dict(zip(texts, self.encode(texts, use_tqdm=use_tqdm), strict=True))
        return [ScoringRequestOutput(
            f"{embedded[a].request_id}+{embedded[b].request_id}",
            embedded[a].prompt_token_ids + embedded[b].prompt_token_ids,
            ScoringOutput(cosine_similarity(_data(embedded[a]), _data(embedded[b]))),
        ) for a, b in pairs]

    def _run_all(self, count: int, add: Callable[[int, str], None],
                 use_tqdm: bool) -> list[RequestOutput | PoolingRequestOutput]:
        """Add `count` requests (`add(index, request_id)`) and run them to the end; their
        final outputs in order. Any failure aborts those already added."""
        order: dict[str, int] = {}
        try:
            for i in range(count):
                request_id = self.engine.next_request_id()
                add(i, request_id)
                order[request_id] = i
            return self._run(order, use_tqdm and count > 1)
        except BaseException:
            for request_id in order:
                self.engine.abort_request(request_id)
            raise

    def _run(self, order: dict[str, int],
             show_progress: bool) -> list[RequestOutput | PoolingRequestOutput]:
        results: list[RequestOutput | PoolingRequestOutput | None] = [None] * len(order)
        bar = tqdm(total=len(order), desc="Processing", unit="req", disable=not show_progress)
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


def _prompt_list(prompts: Any) -> list[Any]:
    """One prompt (text, token ids, a dict) as a list of one; a list of prompts as it is."""
    if isinstance(prompts, (str, dict)) or (
        isinstance(prompts, list) and prompts and isinstance(prompts[0], int)
    ):
        return [prompts]
    return list(prompts)


def _data(output: PoolingRequestOutput) -> list[float]:
    assert output.data is not None, "a finished pooling request has its output"
    return output.data
