"""The front end's tokenizer, loaded without importing torch.

transformers' `AutoTokenizer` imports torch (through its model configs) to decide which
tokenizer class a checkpoint needs. A front end whose engine core runs in another process
has no other use for torch (some 500 MiB resident), so a short-lived child process makes
that decision (converting a GGUF vocabulary there too), and this process loads the class
it chose from the same files: the same tokenizer, while the class's own module needs only
`tokenizers`. The child's choice takes seconds (transformers' configs and their imports);
meanwhile this process imports what every tokenizer class builds on, which it would
otherwise do after the child is done, on the way to the server's start.
"""

from __future__ import annotations

import importlib
import multiprocessing
import tempfile
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from pagoda.model_source import ModelSource


def load_tokenizer(source: ModelSource, override: str | None = None) -> Any:
    """What `source.tokenizer(override)` returns, built in this process without torch."""
    with tempfile.TemporaryDirectory(prefix="pagoda-tokenizer-") as tmp:
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
            choice = pool.submit(_choose, source, override, tmp)
            _import_tokenizer_base()
            module, name, where = choice.result()
        cls = getattr(importlib.import_module(module), name)
        return cls.from_pretrained(where)


_TOKENIZER_BASES = ("transformers.tokenization_utils_tokenizers",  # transformers 5
                    "transformers.tokenization_utils_fast")  # 4
"""The module of the class most checkpoints' tokenizers are or derive from."""


def _import_tokenizer_base() -> None:
    for name in _TOKENIZER_BASES:
        try:
            importlib.import_module(name)
            return
        except ModuleNotFoundError:
            continue


def _choose(source: ModelSource, override: str | None, tmp: str) -> tuple[str, str, str]:
    """In the child: (module, class name, where to load it from) of AutoTokenizer's pick. A
    GGUF's converted tokenizer is saved into `tmp` (the round trip its disk cache makes)."""
    tokenizer = source.tokenizer(override)
    if override:
        where = override
    elif source.format == "hf":
        where = str(source.path)
    else:
        tokenizer.save_pretrained(tmp)
        where = tmp
    cls = type(tokenizer)
    return cls.__module__, cls.__qualname__, where
