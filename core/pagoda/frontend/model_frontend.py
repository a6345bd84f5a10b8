"""What a front end loads before the engine core starts: the model's tokenizer and
sampling defaults, and (in the core's process) its HF config, eos id and max_model_len.
Shared by `LLMEngine` and `AsyncLLM`.

`AsyncLLM`'s front end imports no torch, and transformers' configs do: its cores read the
HF config (`model_config`) and report what the front end needs of it in their `info`."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pagoda.config import EngineConfig, LoRAConfig
from pagoda.frontend.input_processor import InputProcessor
from pagoda.lora.adapter import AdapterCheck, BaseShapes, base_shapes
from pagoda.lora.request import LoRARequest
from pagoda.model_source import ModelSource, resolve_model
from pagoda.pooling import PoolerSpec, read_sentence_transformers_config
from pagoda.sampling_params import SamplingParams

logger = logging.getLogger(__name__)


def context_length(hf_config: Any) -> int:
    """The longest sequence the model was built for, from its HF config."""
    for key in ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length"):
        value = getattr(hf_config, key, None)
        if isinstance(value, int) and value > 0:
            return value
    raise ValueError("cannot tell the model's context length from its config; set max_model_len")


def derive_max_model_len(hf_config: Any, requested: int | None,
                         default_limit: int | None = None) -> int:
    """The requested max_model_len, checked against the model's context length; None: that
    length, or `default_limit` (a sentence-transformers model's max_seq_length) if lower."""
    from pagoda.models.layers.rotary import longrope_context_limit  # torch: engine side

    limit = context_length(hf_config)
    longrope = longrope_context_limit(hf_config)
    if longrope is not None and longrope < limit:
        limit, why = longrope, (" as served: its longrope RoPE scaling is implemented with "
                                "the short factors, which cover the original context "
                                "(original_max_position_embeddings)")
    else:
        why = ""
    if requested is None:
        return min(limit, default_limit or limit)
    if requested > limit:
        raise ValueError(
            f"max_model_len={requested} is larger than the model's context length ({limit}){why}"
        )
    return requested


def model_config(config: EngineConfig, source: ModelSource) -> tuple[Any, int]:
    """(The model's HF config, max_model_len): the requested length checked against the
    model's, or derived from it. Imports torch (transformers' configs)."""
    hf_config = source.hf_config()
    checkpoint = (read_sentence_transformers_config(source.path)
                  if source.format == "hf" and config.model.runner != "generate" else None)
    max_model_len = derive_max_model_len(hf_config, config.model.max_model_len,
                                         checkpoint.max_seq_length if checkpoint else None)
    return hf_config, max_model_len


def config_eos_token_id(hf_config: Any) -> int | None:
    """The HF config's end-of-sequence id (the first of several), if it names one."""
    eos = getattr(hf_config, "eos_token_id", None)
    return eos[0] if isinstance(eos, list) else eos


def check_draft_model(config: EngineConfig, hf_config: Any, tokenizer: Any) -> None:
    """ValueError naming the field where the draft model (speculative_model) cannot serve
    the model: on several devices (not supported yet), or unless its vocabulary is the
    model's: the same number of token ids (the LM heads' rows, compared as probabilities
    token by token), and for those ids the same tokens in both tokenizers (tokens past
    them, which neither model outputs, may differ)."""
    if config.parallel.world_size > 1:
        raise ValueError("speculative_method draft: not supported with tensor_parallel_size "
                         "or pipeline_parallel_size above 1 yet (the draft model runs on "
                         "the model's one device)")
    assert config.speculative.speculative_model is not None
    source = resolve_model(config.speculative.speculative_model)
    size = source.hf_config().get_text_config().vocab_size
    expected = hf_config.get_text_config().vocab_size
    if size != expected:
        raise ValueError(f"speculative_model: {source.name} has a vocabulary of {size} "
                         f"tokens, the model {expected}; a draft model must share them")
    def tokens(tok: Any) -> dict[str, int]:
        return {token: i for token, i in tok.get_vocab().items() if i < size}

    if tokens(source.tokenizer()) != tokens(tokenizer):
        raise ValueError(f"speculative_model: {source.name}'s tokenizer maps tokens to ids "
                         "other than the model's; a draft model must share its tokenizer")


@dataclass
class ModelFrontend:
    source: ModelSource
    tokenizer: Any
    generation_defaults: dict[str, Any]
    """Sampling defaults from generation_config.json (empty unless generation_config="auto")."""
    hf_config: Any = None
    """The model's HF config when the engine core runs in this process; None: it runs in
    processes of their own, which report `vocab_size` and `eos_token_id` (`set_model_facts`)."""
    vocab_size: int = 0
    eos_token_id: int | None = None
    lora_base: BaseShapes | None = None
    """What LoRA adapters must fit (set with the other model facts)."""

    @classmethod
    def load(cls, config: EngineConfig, core_in_process: bool = True,
             source: ModelSource | None = None) -> ModelFrontend:
        """Resolve (unless `source` is given) and load the model's front-end pieces. With
        `core_in_process` also the HF config (filling in config.model.max_model_len);
        without it nothing that imports torch (the tokenizer class is chosen in a child
        process)."""
        source = source or resolve_model(config.model.model)
        if core_in_process:
            tokenizer = source.tokenizer(config.model.tokenizer)
        else:
            from pagoda.frontend.tokenizer_loader import load_tokenizer

            tokenizer = load_tokenizer(source, config.model.tokenizer)
        logger.debug("Tokenizer loaded: %s", type(tokenizer).__name__)
        if config.model.chat_template:
            tokenizer.chat_template = config.model.chat_template
        defaults = source.generation_defaults() if config.model.generation_config == "auto" else {}
        frontend = cls(source, tokenizer, defaults)
        if core_in_process:
            frontend.hf_config, config.model.max_model_len = model_config(config, source)
            frontend.set_model_facts(frontend.hf_config.vocab_size,
                                     config_eos_token_id(frontend.hf_config),
                                     base_shapes(frontend.hf_config))
            if config.speculative.speculative_model is not None:
                check_draft_model(config, frontend.hf_config, tokenizer)
        return frontend

    def set_model_facts(self, vocab_size: int, config_eos: int | None,
                        shapes: BaseShapes | None) -> None:
        """The vocabulary size, the HF config's eos id (None: the tokenizer's) and what
        LoRA adapters must fit (None for models LoRA does not apply to)."""
        self.lora_base = shapes
        self.vocab_size = vocab_size
        self.eos_token_id = config_eos if config_eos is not None else self.tokenizer.eos_token_id

    def default_sampling_params(self) -> SamplingParams:
        """SamplingParams with the model's generation_config.json defaults applied."""
        return SamplingParams(**self.generation_defaults)

    def input_processor(self, max_model_len: int, pooler: PoolerSpec | None = None,
                        lora: LoRAConfig | None = None,
                        load_lora: Callable[[LoRARequest], str | None] | None = None
                        ) -> InputProcessor:
        """An InputProcessor for the core's final max_model_len, what the model outputs
        (the core's `info["pooler"]`; None: it generates) and the LoRA settings;
        `load_lora`: see `AdapterCheck`."""
        lora = lora or LoRAConfig()
        return InputProcessor(self.tokenizer, max_model_len, self.vocab_size, self.eos_token_id,
                              pooler, AdapterCheck(self.lora_base, lora.enable_lora,
                                                   lora.max_lora_rank, load_lora))
