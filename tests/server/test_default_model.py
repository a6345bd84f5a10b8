"""`pagoda serve` with no model: the embedded SmolLM2 answers real questions."""

from __future__ import annotations

import anthropic
import openai
import pytest

from tests.server.server_process import ServerProcess

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def default_server(tmp_path_factory):
    process = ServerProcess([], tmp_path_factory.mktemp("default") / "serve.log")
    yield process
    process.stop()


def test_banner_and_openai_chat(default_server):
    banner = default_server.output()
    for line in ("plugin:     pagoda-", "device:", "attention:", "KV cache:",
                 f"listening:  {default_server.url}"):
        assert line in banner, banner
    with openai.OpenAI(base_url=f"{default_server.url}/v1", api_key="unused") as client:
        model = client.models.list().data[0].id
        reply = client.chat.completions.create(
            model=model, temperature=0, max_tokens=20,
            messages=[{"role": "user", "content": "What is the capital of France?"}])
    assert "Paris" in reply.choices[0].message.content


def test_anthropic_stream(default_server):
    with anthropic.Anthropic(base_url=default_server.url, api_key="unused") as client, \
            client.messages.stream(
                model="smollm2-135m-instruct", max_tokens=20, extra_body={"temperature": 0},
                messages=[{"role": "user", "content": "What is the capital of Germany?"}],
            ) as stream:
        text = "".join(stream.text_stream)
    assert "Berlin" in text
