"""An AsyncLLM from the engine options every engine-running command shares."""

from __future__ import annotations

import argparse

from pagoda.cli.engine_args import engine_kwargs
from pagoda.config import CacheConfig, EngineConfig, ModelConfig, SchedulerConfig


def engine_config(args: argparse.Namespace, served_model_name: str | None = None) -> EngineConfig:
    """The EngineConfig for parsed `add_engine_arguments` options."""
    kw = engine_kwargs(args)
    return EngineConfig(
        model=ModelConfig(kw["model"], kw["tokenizer"], kw["dtype"], kw["load_format"],
                          kw["max_model_len"], kw["seed"], served_model_name=served_model_name,
                          generation_config=kw["generation_config"],
                          chat_template=kw["chat_template"]),
        cache=CacheConfig(kw["block_size"], kw["kv_cache_memory"], kw["memory_fraction"],
                          enable_prefix_caching=kw["enable_prefix_caching"]),
        scheduler=SchedulerConfig(kw["max_num_seqs"], kw["max_num_batched_tokens"],
                                  kw["scheduling_policy"], kw["enable_chunked_prefill"]),
        device=kw["device"],
        attention_backend=kw["attention_backend"],
    )
