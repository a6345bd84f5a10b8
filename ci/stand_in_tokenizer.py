"""Give a config-only model directory a tokenizer: one word "w<id>" per token id.

Benchmarks on dummy weights send token ids, but the engine and the server still load a
tokenizer, and streamed text must be non-empty for every id to time tokens. With
`json_chars`, ids 3..97 are the printable ASCII characters instead, so that a JSON schema
can be spelled (the structured-output benchmark).

    python ci/stand_in_tokenizer.py MODEL_DIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast


def save_stand_in_tokenizer(model_dir: Path, json_chars: bool = False) -> None:
    config = json.loads((model_dir / "config.json").read_text())
    vocab = {f"w{i}": i for i in range(config["vocab_size"])}
    if json_chars:
        vocab = {(chr(0x20 + i - 3) if 3 <= i < 98 else word): i for word, i in vocab.items()}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="w0", bos_token=f"w{config['bos_token_id']}",
        eos_token=f"w{config['eos_token_id']}",
    ).save_pretrained(model_dir)


if __name__ == "__main__":
    save_stand_in_tokenizer(Path(sys.argv[1]))
