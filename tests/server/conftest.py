"""One tiny-model server shared by the server tests (API key enforced), and its model."""

from __future__ import annotations

from pathlib import Path

import pytest
from transformers import AutoTokenizer

from tests.engine.tiny_models import make_checkpoint, tiny_configs
from tests.server.server_process import ServerProcess

API_KEY = "test-key-1"
MODEL = "tiny"
CHAT_TEMPLATE = ("{% for m in messages %}{{ m['content'] }} {% endfor %}"
                 "{% if add_generation_prompt %}w3{% endif %}")
"""For the word-level tiny tokenizer: contents joined, then "w3" to start the answer."""
TINY_SERVER_ARGS = ["--dtype", "float32", "--device", "cpu", "--kv-cache-memory", "2MiB",
                    "--served-model-name", MODEL, "--served-model-name", "tiny-alias"]


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Llama whose tokenizer has a chat template."""
    path = make_checkpoint(tmp_path_factory.mktemp("tiny-llama"), tiny_configs()["llama"])
    tokenizer = AutoTokenizer.from_pretrained(path)
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def server(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory):
    process = ServerProcess([str(tiny_model), *TINY_SERVER_ARGS, "--api-key", "other-key",
                             "--api-key", API_KEY],
                            tmp_path_factory.mktemp("server") / "serve.log", api_key=API_KEY)
    yield process
    process.stop()


@pytest.fixture(scope="session")
def smollm2_server(tmp_path_factory: pytest.TempPathFactory):
    """The embedded default (SmolLM2-135M-Instruct) served with its defaults, no API key."""
    process = ServerProcess(["--max-model-len", "1024"],
                            tmp_path_factory.mktemp("smollm2") / "serve.log")
    yield process
    process.stop()
