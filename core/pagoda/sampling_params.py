"""SamplingParams: how one request picks its tokens and when it stops (vLLM-compatible)."""

from __future__ import annotations

import copy
import enum
from collections.abc import Callable
from dataclasses import dataclass, field

from pagoda.structured.params import StructuredOutputsParams

GREEDY_EPS = 1e-5
"""Temperatures below this are greedy."""
MAX_LOGIT_BIAS = 100.0

# Limits on what one request may ask for: each bounds the work or memory a request costs
# every step (stop strings are searched in the new text of each step) or at admission.
MAX_N = 128
"""Most samples of one prompt (OpenAI's limit on `n`)."""
SEED_RANGE = (-(2**63), 2**63 - 1)
"""Seeds are signed 64-bit integers, as in OpenAI's API."""
MAX_STOP_STRINGS = 64
MAX_STOP_CHARS = 1024
"""Longest stop string, in characters."""
MAX_STOP_TOKEN_IDS = 1024
MAX_LOGIT_BIAS_ENTRIES = 4096
MAX_BAD_WORDS = 1024


class SamplingType(enum.Enum):
    GREEDY = "greedy"
    RANDOM = "random"
    RANDOM_SEED = "random_seed"


def _check(ok: bool, name: str, allowed: str, value: object) -> None:
    if not ok:
        raise ValueError(f"{name} must be {allowed}, got {value!r}")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_count(name: str, values: object, limit: int) -> None:
    """A list or map of at most `limit` entries (the error gives its size, not its items)."""
    if isinstance(values, (list, dict, tuple)) and len(values) > limit:
        raise ValueError(f"{name} has {len(values)} entries: at most {limit} are allowed")


def _check_token_ids(name: str, ids: list[int]) -> None:
    for token_id in ids:
        _check(_is_int(token_id) and token_id >= 0, name, "a list of token ids >= 0", ids)


_FLOAT_FIELDS = ("temperature", "top_p", "min_p", "presence_penalty", "frequency_penalty",
                 "repetition_penalty")


@dataclass
class SamplingParams:
    """Parameters of one request; invalid values raise ValueError naming the field.

    `top_k` of -1 is stored as 0 (off); `stop` is normalised to a list; `logit_bias`
    keys may be numeric strings (as JSON sends them) and are stored as ints.
    """

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    seed: int | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False
    max_tokens: int | None = 16
    min_tokens: int = 0
    logprobs: int | None = None
    prompt_logprobs: int | None = None
    logit_bias: dict[int, float] = field(default_factory=dict)
    allowed_token_ids: list[int] | None = None
    bad_words: list[str] | None = None
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    detokenize: bool = True
    structured_outputs: StructuredOutputsParams | None = None
    """A grammar the output must follow (JSON schema, JSON object, regex, choice, EBNF)."""
    thinking_budget: int | None = None
    """For models that think in tags: at most this many output tokens of thinking. Once
    they are spent, `thinking_end` is written in the model's place and the answer follows."""
    thinking_end: str = "</think>"
    """The text that ends the model's thinking (with `thinking_budget`)."""
    bad_words_token_ids: list[list[int]] = field(default_factory=list, init=False)
    """Token-id sequences of `bad_words`, filled by `encode_bad_words`."""
    thinking_end_token_ids: list[int] = field(default_factory=list, init=False)
    """`thinking_end`'s token ids, filled by `encode_thinking_end`."""

    def __post_init__(self) -> None:
        if self.top_k == -1:
            self.top_k = 0
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        self.stop = list(self.stop or [])
        self.stop_token_ids = list(self.stop_token_ids or [])
        self.logit_bias = self._normalise_logit_bias(self.logit_bias or {})
        self._validate()

    def _validate(self) -> None:
        for name in _FLOAT_FIELDS:
            value = getattr(self, name)
            _check(isinstance(value, (int, float)) and not isinstance(value, bool), name,
                   "a number", value)
        _check(_is_int(self.n) and 1 <= self.n <= MAX_N, "n", f"an integer in [1, {MAX_N}]",
               self.n)
        _check(self.temperature >= 0, "temperature", ">= 0", self.temperature)
        _check(0 < self.top_p <= 1, "top_p", "in (0, 1]", self.top_p)
        _check(_is_int(self.top_k) and self.top_k >= 0, "top_k",
               "-1 or 0 (off) or an integer >= 1", self.top_k)
        _check(0 <= self.min_p <= 1, "min_p", "in [0, 1]", self.min_p)
        for name in ("presence_penalty", "frequency_penalty"):
            value = getattr(self, name)
            _check(-2 <= value <= 2, name, "in [-2, 2]", value)
        _check(self.repetition_penalty > 0, "repetition_penalty", "> 0", self.repetition_penalty)
        low, high = SEED_RANGE
        _check(self.seed is None or (_is_int(self.seed) and low <= self.seed <= high), "seed",
               "a signed 64-bit integer or None", self.seed)
        _check_count("stop", self.stop, MAX_STOP_STRINGS)
        for stop in self.stop:
            _check(isinstance(stop, str) and stop != "", "stop",
                   "a non-empty string or a list of them", self.stop)
            if len(stop) > MAX_STOP_CHARS:
                raise ValueError(f"stop has a string of {len(stop)} characters: at most "
                                 f"{MAX_STOP_CHARS} are allowed")
        _check_count("stop_token_ids", self.stop_token_ids, MAX_STOP_TOKEN_IDS)
        _check_token_ids("stop_token_ids", self.stop_token_ids)
        _check(self.max_tokens is None or (_is_int(self.max_tokens) and self.max_tokens >= 1),
               "max_tokens", "an integer >= 1 or None", self.max_tokens)
        _check(_is_int(self.min_tokens) and self.min_tokens >= 0, "min_tokens",
               "an integer >= 0", self.min_tokens)
        if self.max_tokens is not None:
            _check(self.min_tokens <= self.max_tokens, "min_tokens",
                   f"<= max_tokens ({self.max_tokens})", self.min_tokens)
        for name in ("logprobs", "prompt_logprobs"):
            value = getattr(self, name)
            _check(value is None or (_is_int(value) and value >= 0), name,
                   "an integer >= 0 or None", value)
        if self.allowed_token_ids is not None:
            _check(len(self.allowed_token_ids) > 0, "allowed_token_ids",
                   "a non-empty list or None", self.allowed_token_ids)
            _check_token_ids("allowed_token_ids", self.allowed_token_ids)
        _check_count("bad_words", self.bad_words, MAX_BAD_WORDS)
        for word in self.bad_words or []:
            _check(isinstance(word, str), "bad_words", "a list of strings", self.bad_words)
        _check(self.thinking_budget is None
               or (_is_int(self.thinking_budget) and self.thinking_budget >= 0),
               "thinking_budget", "an integer >= 0 or None", self.thinking_budget)
        _check(isinstance(self.thinking_end, str) and self.thinking_end != "", "thinking_end",
               "a non-empty string", self.thinking_end)
        _check(self.structured_outputs is None
               or isinstance(self.structured_outputs, StructuredOutputsParams),
               "structured_outputs", "a StructuredOutputsParams or None", self.structured_outputs)

    @staticmethod
    def _normalise_logit_bias(bias: dict[int | str, float]) -> dict[int, float]:
        allowed = f"a map of token id >= 0 to a bias in [-{MAX_LOGIT_BIAS}, {MAX_LOGIT_BIAS}]"
        _check_count("logit_bias", bias, MAX_LOGIT_BIAS_ENTRIES)
        out = {}
        for key, value in bias.items():
            try:
                token_id = int(key)
            except (TypeError, ValueError):
                raise ValueError(f"logit_bias must be {allowed}, got key {key!r}") from None
            _check(token_id >= 0, "logit_bias", allowed, {key: value})
            _check(isinstance(value, (int, float)) and abs(value) <= MAX_LOGIT_BIAS,
                   "logit_bias", allowed, {key: value})
            out[token_id] = float(value)
        return out

    @property
    def sampling_type(self) -> SamplingType:
        if self.temperature < GREEDY_EPS:
            return SamplingType.GREEDY
        return SamplingType.RANDOM if self.seed is None else SamplingType.RANDOM_SEED

    @property
    def is_greedy(self) -> bool:
        return self.sampling_type is SamplingType.GREEDY

    @property
    def has_penalties(self) -> bool:
        return (self.repetition_penalty != 1.0 or self.frequency_penalty != 0.0
                or self.presence_penalty != 0.0)

    def validate_for_vocab(self, vocab_size: int) -> None:
        """Raise ValueError naming the field and id of any token id >= vocab_size."""
        fields = {
            "stop_token_ids": self.stop_token_ids,
            "allowed_token_ids": self.allowed_token_ids or [],
            "logit_bias": list(self.logit_bias),
        }
        for name, ids in fields.items():
            for token_id in ids:
                if token_id >= vocab_size:
                    raise ValueError(f"{name} contains token id {token_id}, out of "
                                     f"the vocabulary range [0, {vocab_size})")

    def encode_bad_words(self, encode: Callable[[str], list[int]]) -> None:
        """Fill `bad_words_token_ids` with `encode` (text -> ids, no special tokens).

        Each word is encoded bare and with a leading space; the spaced form is kept
        when it differs in its first token but not in length (vLLM's rule).
        """
        self.bad_words_token_ids = []
        _check_count("bad_words", self.bad_words, MAX_BAD_WORDS)
        for word in self.bad_words or []:
            bare = encode(word.lstrip())
            if not bare:
                continue
            self.bad_words_token_ids.append(bare)
            spaced = encode(" " + word.lstrip())
            if spaced and spaced[0] != bare[0] and len(spaced) == len(bare):
                self.bad_words_token_ids.append(spaced)

    def encode_thinking_end(self, encode: Callable[[str], list[int]]) -> None:
        """Fill `thinking_end_token_ids` with `encode` (text -> ids, no special tokens);
        ValueError when the text encodes to no token."""
        self.thinking_end_token_ids = encode(self.thinking_end)
        if not self.thinking_end_token_ids:
            raise ValueError(f"thinking_end {self.thinking_end!r} encodes to no token of "
                             "this model's tokenizer")

    def clone(self) -> SamplingParams:
        return copy.deepcopy(self)

    def with_seed(self, seed: int | None) -> SamplingParams:
        """A copy with another seed (e.g. `seed + i` for the i-th of n samples)."""
        params = self.clone()
        params.seed = seed
        params._validate()
        return params
