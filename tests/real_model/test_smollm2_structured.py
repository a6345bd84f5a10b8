"""SmolLM2 through `LLM` with a JSON schema on each request: the answers validate."""

from __future__ import annotations

import json

import jsonschema
import pytest

from pagoda import LLM, SamplingParams, StructuredOutputsParams
from tests.real_model.structured_schemas import SCHEMAS

pytestmark = pytest.mark.slow


def test_json_schemas_validate(smollm2):
    llm = LLM(str(smollm2.path), max_model_len=1024)
    names = sorted(SCHEMAS)
    params = [SamplingParams(temperature=0.0, max_tokens=100,
                             structured_outputs=StructuredOutputsParams(json=SCHEMAS[n][1]))
              for n in names]
    params.append(SamplingParams(temperature=0.0, max_tokens=12))  # one without, in the batch
    conversations = [[{"role": "user", "content": SCHEMAS[n][0]}] for n in names]
    conversations.append([{"role": "user", "content": "What is the capital of Germany?"}])
    outputs = llm.chat(conversations, params, use_tqdm=False)
    for name, out in zip(names, outputs):
        completion = out.outputs[0]
        assert completion.finish_reason == "stop", (name, completion.text)
        jsonschema.validate(json.loads(completion.text), SCHEMAS[name][1])
    assert "Berlin" in outputs[-1].outputs[0].text
