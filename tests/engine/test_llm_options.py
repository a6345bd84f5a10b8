"""`LLM(...)` takes every engine option by its flat name, and the engine runs with them."""

from __future__ import annotations

from pathlib import Path

import pytest

from pagoda import LLM, SamplingParams
from pagoda.config import EngineConfig
from pagoda.config.fields import flat_fields, flat_values
from tests.engine.tiny_models import make_checkpoint, tiny_configs

TEMPLATE = "{% for m in messages %}{{ m['content'] }} {% endfor %}w3"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_checkpoint(tmp_path_factory.mktemp("llama"), tiny_configs()["llama"])


def test_every_engine_option_is_an_llm_keyword(model_dir: Path, tmp_path: Path) -> None:
    template = tmp_path / "template.jinja"
    template.write_text(TEMPLATE)
    options = {
        "model": str(model_dir), "tokenizer": str(model_dir), "dtype": "float32",
        "load_format": "safetensors", "max_model_len": 64, "seed": 3,
        "served_model_name": ["tiny"], "generation_config": "pagoda",
        "chat_template": str(template), "quantization": "none", "runner": "generate",
        "model_impl": "pagoda",
        "block_size": 8, "kv_cache_memory": 2**20, "memory_fraction": 0.5,
        "gpu_memory_utilization": 0.5, "kv_cache_dtype": "float32",
        "enable_prefix_caching": False, "num_kv_blocks": 24,
        "max_num_seqs": 4, "max_num_batched_tokens": 64, "scheduling_policy": "priority",
        "enable_chunked_prefill": False, "async_scheduling": False, "max_waiting_requests": 100,
        "tensor_parallel_size": 1, "pipeline_parallel_size": 1,
        "data_parallel_size": 1, "enable_expert_parallel": False, "pooling": None,
        "normalize_embeddings": None, "speculative_method": "ngram",
        "num_speculative_tokens": 2, "prompt_lookup_min": 1, "prompt_lookup_max": 3,
        "speculative_model": None, "speculative_dtype": None, "speculative_quantization": None,
        "speculative_disable_by_batch_size": 4,
        "enable_lora": True, "max_loras": 2, "max_lora_rank": 8, "max_cpu_loras": 3,
        "device": "cpu", "attention_backend": "cpu_sdpa", "distributed_executor_backend": "uniproc",
        "enforce_eager": True, "graph_batch_sizes": [1, 2],
    }
    assert set(options) == set(flat_fields(EngineConfig))
    llm = LLM(**options)
    assert flat_values(llm.engine.config) == {**options, "chat_template": TEMPLATE}
    info = llm.engine.core.info
    assert (info["platform"], info["attention_backend"]) == ("cpu", "cpu_sdpa")
    assert info["model_class"] == "LlamaForCausalLM"
    assert (info["kv_cache_blocks"], info["kv_cache_tokens"]) == (24, 24 * 8)
    assert info["async_scheduling"] is False
    params = SamplingParams(temperature=0.0, max_tokens=3, ignore_eos=True)
    (out,) = llm.chat([{"role": "user", "content": "w10 w11"}], params, use_tqdm=False)
    assert out.prompt_token_ids == [10, 11, 3]  # the template read from the file
    assert len(out.outputs[0].token_ids) == 3
