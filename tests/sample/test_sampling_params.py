import pytest

from pagoda.sampling_params import SamplingParams, SamplingType

INVALID = [
    ({"n": 0}, "n", "in [1, 128]"),
    ({"temperature": -0.1}, "temperature", ">= 0"),
    ({"temperature": "hot"}, "temperature", "a number"),
    ({"top_p": 0.0}, "top_p", "(0, 1]"),
    ({"top_p": 1.5}, "top_p", "(0, 1]"),
    ({"top_k": -2}, "top_k", ">= 1"),
    ({"min_p": 1.1}, "min_p", "[0, 1]"),
    ({"presence_penalty": 2.5}, "presence_penalty", "[-2, 2]"),
    ({"frequency_penalty": -3}, "frequency_penalty", "[-2, 2]"),
    ({"repetition_penalty": 0.0}, "repetition_penalty", "> 0"),
    ({"seed": 1.5}, "seed", "integer"),
    ({"stop": ["ok", ""]}, "stop", "non-empty"),
    ({"stop_token_ids": [-1]}, "stop_token_ids", ">= 0"),
    ({"max_tokens": 0}, "max_tokens", ">= 1"),
    ({"min_tokens": -1}, "min_tokens", ">= 0"),
    ({"min_tokens": 5, "max_tokens": 4}, "min_tokens", "<= max_tokens"),
    ({"logprobs": -1}, "logprobs", ">= 0"),
    ({"prompt_logprobs": -1}, "prompt_logprobs", ">= 0"),
    ({"logit_bias": {3: 101.0}}, "logit_bias", "[-100.0, 100.0]"),
    ({"logit_bias": {"x": 1.0}}, "logit_bias", "token id"),
    ({"logit_bias": {-1: 1.0}}, "logit_bias", "token id >= 0"),
    ({"allowed_token_ids": []}, "allowed_token_ids", "non-empty"),
    ({"allowed_token_ids": [1, -4]}, "allowed_token_ids", ">= 0"),
    ({"bad_words": ["a", 3]}, "bad_words", "strings"),
]


@pytest.mark.parametrize(("kwargs", "name", "allowed"), INVALID)
def test_invalid_value_names_field_and_range(kwargs, name, allowed):
    with pytest.raises(ValueError) as info:
        SamplingParams(**kwargs)
    message = str(info.value)
    assert message.startswith(name + " ")
    assert allowed in message


def test_defaults_and_normalisation():
    params = SamplingParams(top_k=-1, stop="###", logit_bias={"7": 2}, max_tokens=None)
    assert params.top_k == 0
    assert params.stop == ["###"]
    assert params.logit_bias == {7: 2.0}
    assert params.stop_token_ids == []
    assert params.skip_special_tokens and params.spaces_between_special_tokens
    assert params.detokenize and params.max_tokens is None


def test_sampling_type():
    assert SamplingParams(temperature=0.0).sampling_type is SamplingType.GREEDY
    assert SamplingParams(temperature=0.0).is_greedy
    assert SamplingParams(temperature=0.5).sampling_type is SamplingType.RANDOM
    assert SamplingParams(temperature=0.5, seed=1).sampling_type is SamplingType.RANDOM_SEED


def test_validate_for_vocab_names_field_and_id():
    SamplingParams(stop_token_ids=[9], allowed_token_ids=[0, 9], logit_bias={9: 1}) \
        .validate_for_vocab(10)
    for kwargs, name, bad_id in [({"stop_token_ids": [3, 10]}, "stop_token_ids", 10),
                                 ({"allowed_token_ids": [12]}, "allowed_token_ids", 12),
                                 ({"logit_bias": {50: 1.0}}, "logit_bias", 50)]:
        with pytest.raises(ValueError, match=rf"^{name} contains token id {bad_id}\b"):
            SamplingParams(**kwargs).validate_for_vocab(10)


def test_encode_bad_words_adds_spaced_variant_vllm_style():
    vocab = {"bad": [1], " bad": [2], "two words": [3, 4], " two words": [5, 4],
             "odd": [6], " odd": [7, 6]}
    params = SamplingParams(bad_words=["bad", " two words", "odd"])
    params.encode_bad_words(lambda text: vocab[text])
    # " odd" encodes to a different length (a separate space token): not kept.
    assert params.bad_words_token_ids == [[1], [2], [3, 4], [5, 4], [6]]


def test_clone_and_with_seed_are_independent():
    params = SamplingParams(seed=3, stop=["x"])
    params.bad_words_token_ids = [[1]]
    child = params.with_seed(4)
    assert (child.seed, params.seed) == (4, 3)
    assert child.bad_words_token_ids == [[1]]
    child.stop.append("y")
    assert params.stop == ["x"]
    assert params.clone() == params
