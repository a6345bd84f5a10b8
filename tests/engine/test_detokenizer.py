"""IncrementalDetokenizer: the tokenizers library's DecodeStream path emits exactly what the
`tokenizer.decode` path does, step by step, for byte-level BPE (the real SmolLM2 one and a
small trained one), sentencepiece-style byte fallback and word-level tokenizers."""

from __future__ import annotations

import random

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from tokenizers.decoders import DecodeStream
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from pagoda.frontend.detokenizer import IncrementalDetokenizer, streaming_backend
from pagoda.model_source import resolve_model
from tests.engine.tiny_models import save_tokenizer

CORPUS = [
    "Hello world, this is a streaming test. It's fine, isn't it?",
    "ünïcödé façade naïve café — “quotes” and ‘more’",
    "日本語のテキストと中文文本，还有한국어 텍스트.",
    "emoji 😀🎉👍🏽 and symbols € £ ¥ ∑ ∞ → ✓",
    "def f(x):\n    return x * 2  # code\n\n\tindent",
]
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def _byte_level() -> PreTrainedTokenizerFast:
    """A small GPT-2-style byte-level BPE (like SmolLM2's, Llama 3's, Qwen's)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS * 4, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>",
                                   additional_special_tokens=SPECIALS[1:])


def _sentencepiece_style() -> PreTrainedTokenizerFast:
    """A Llama-2-style tokenizer: "▁" for spaces, <0xNN> byte fallback, a decoder that
    strips the text's leading space."""
    pieces = ["▁", "▁the", "▁a", "▁hello", "▁world", "world", "▁test", "s", "t", "e", ".",
              ",", "'s", "é", "▁café", "日本", "語", "▁日本", "\n", "▁▁", "▁▁▁▁", "x", "▁x"]
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    vocab |= {f"<0x{b:02X}>": 3 + b for b in range(256)}
    vocab |= {piece: 259 + i for i, piece in enumerate(pieces)}
    tok = Tokenizer(models.BPE(vocab, [], unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                                     decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                                   unk_token="<unk>")


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory):
    word_level_dir = tmp_path_factory.mktemp("word_level")
    save_tokenizer(word_level_dir)
    return {
        "smollm2": resolve_model("smollm2-135m-instruct").tokenizer(),
        "byte_level": _byte_level(),
        "sentencepiece_style": _sentencepiece_style(),
        "word_level": AutoTokenizer.from_pretrained(word_level_dir),
    }


class _DecodeOnly:
    """A tokenizer with no backend to stream from: the detokenizer decodes windows itself."""

    def __init__(self, tokenizer):
        self.decode = tokenizer.decode


def _chunks(tokenizer, prompt: list[int], output: list[int], **kwargs) -> list[str]:
    detok = IncrementalDetokenizer(tokenizer, prompt, **kwargs)
    return [detok.add_token(token) for token in output]


NAMES = ["smollm2", "byte_level", "sentencepiece_style", "word_level"]


@pytest.mark.parametrize("name", NAMES)
def test_fast_tokenizers_stream_in_rust(tokenizers, name):
    assert streaming_backend(tokenizers[name]) is tokenizers[name].backend_tokenizer
    assert streaming_backend(_DecodeOnly(tokenizers[name])) is None


def test_tokenizers_that_clean_up_spaces_do_not_stream(tokenizers):
    word_level = tokenizers["word_level"]
    word_level.clean_up_tokenization_spaces = True  # not BPE: transformers cleans up " ."
    try:
        assert streaming_backend(word_level) is None
    finally:
        word_level.clean_up_tokenization_spaces = False


@pytest.mark.parametrize("skip_special_tokens, spaces_between_special_tokens",
                         [(True, True), (False, True), (False, False)])
@pytest.mark.parametrize("name", NAMES)
def test_stream_emits_what_decode_windows_emit(tokenizers, name, skip_special_tokens,
                                               spaces_between_special_tokens):
    """Random ids: half from the low ids (specials, byte tokens, split characters), a few
    past the tokenizer's vocabulary (a model's padded vocabulary can sample those)."""
    tokenizer = tokenizers[name]
    vocab = len(tokenizer)
    rng = random.Random(f"{name}-{skip_special_tokens}-{spaces_between_special_tokens}")
    kwargs = dict(skip_special_tokens=skip_special_tokens,
                  spaces_between_special_tokens=spaces_between_special_tokens)
    for _ in range(60):
        ids = [rng.randrange(300) if rng.random() < 0.5 else rng.randrange(vocab + 8)
               for _ in range(rng.randint(1, 8) + 40)]
        prompt, output = ids[:-40], ids[-40:]
        expected = _chunks(_DecodeOnly(tokenizer), prompt, output, **kwargs)
        assert _chunks(tokenizer, prompt, output, **kwargs) == expected, (prompt, output)


@pytest.mark.parametrize("skip_special_tokens", [True, False])
@pytest.mark.parametrize("name", ["smollm2", "byte_level", "sentencepiece_style"])
def test_streamed_text_is_the_decoded_text(tokenizers, name, skip_special_tokens):
    """Real text, special tokens included: the pieces add up to what decode gives, and a
    multi-byte character split across tokens never shows half of itself."""
    tokenizer = tokenizers[name]
    text = f"{SPECIALS[1]}user\n" + "\n".join(CORPUS) + SPECIALS[2]
    ids = tokenizer.encode(text, add_special_tokens=False)
    for cut in (1, 3, 6, 10):
        prompt, output = ids[:cut], ids[cut:]
        chunks = _chunks(tokenizer, prompt, output, skip_special_tokens=skip_special_tokens)
        assert chunks == _chunks(_DecodeOnly(tokenizer), prompt, output,
                                 skip_special_tokens=skip_special_tokens)
        assert not any("\ufffd" in chunk for chunk in chunks)
        whole = tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)
        context = tokenizer.decode(prompt[-5:], skip_special_tokens=skip_special_tokens)
        assert whole.endswith("".join(chunks))
        assert tokenizer.decode(prompt[-5:] + output,
                                skip_special_tokens=skip_special_tokens) == context + "".join(chunks)


@pytest.mark.parametrize("name", ["smollm2", "byte_level", "sentencepiece_style"])
def test_prompt_ending_inside_a_character(tokenizers, name):
    """The prompt's last token is half a character: its text stays the prompt's."""
    tokenizer = tokenizers[name]
    ids = tokenizer.encode("a 日本語 😀 café", add_special_tokens=False)
    for cut in range(1, len(ids)):
        if tokenizer.decode(ids[:cut]).endswith("\ufffd"):
            chunks = _chunks(tokenizer, ids[:cut], ids[cut:])
            assert chunks == _chunks(_DecodeOnly(tokenizer), ids[:cut], ids[cut:])
            assert not "".join(chunks).startswith(tokenizer.decode(ids[:cut]).rstrip("\ufffd"))
            return
    pytest.fail("no token of the text splits a character")


def test_decoder_whose_text_is_not_prefix_stable():
    """DecodeStream refuses text that rewrites what it already emitted ("a", then "ab" ->
    "X"); the request goes on decoding windows itself, as without a stream."""
    vocab = {"<unk>": 0, "a": 1, "b": 2, "c": 3}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.decoder = decoders.Sequence([decoders.Fuse(), decoders.Replace("ab", "X")])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>")
    prompt, output = [3], [1, 2, 3, 1, 3, 2, 2, 1]
    stream = DecodeStream(ids=prompt, skip_special_tokens=True)
    with pytest.raises(Exception, match="prefix"):
        for token in output:
            stream.step(tok, token)
    assert _chunks(tokenizer, prompt, output) == _chunks(_DecodeOnly(tokenizer), prompt, output)
