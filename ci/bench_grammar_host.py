"""The host's work of structured outputs per decode step: filling the token bitmask of N
requests and accepting their tokens, for benchmark S's schema and the 8B shape's
vocabulary (the stand-in tokenizer with JSON characters, as ci/gpu_bench.py builds it).

    python ci/bench_grammar_host.py [--requests 1000] [--steps 30]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "ci"))

from stand_in_tokenizer import save_stand_in_tokenizer  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()

    from transformers import AutoTokenizer

    from pagoda.bench.backends import BENCH_SCHEMA
    from pagoda.structured import StructuredOutputsParams
    from pagoda.structured.engine import Grammars

    path = Path(tempfile.mkdtemp()) / "llama3-8b"
    path.mkdir()
    shutil.copy(ROOT / "ci" / "models" / "llama3-8b" / "config.json", path)
    save_stand_in_tokenizer(path, True)
    tokenizer = AutoTokenizer.from_pretrained(path)
    vocab = json.loads((path / "config.json").read_text())["vocab_size"]
    grammars = Grammars(lambda: tokenizer, vocab)
    params = StructuredOutputsParams(json=BENCH_SCHEMA)
    requests = [grammars.start(params, [tokenizer.eos_token_id]) for _ in range(args.requests)]
    while not all(r.ready for r in requests):
        time.sleep(0.01)
    ids = [str(i) for i in range(args.requests)]
    rng = random.Random(0)
    fill = accept = 0.0
    for _ in range(args.steps):
        start = time.perf_counter()
        bitmask = grammars.bitmask(ids, requests).bitmask
        fill += time.perf_counter() - start
        tokens = []
        for row in bitmask:  # some allowed token of each row
            word = rng.choice(row.nonzero().flatten().tolist()[:64])
            bits = int(row[word]) & 0xFFFFFFFF
            tokens.append(32 * word + next(i for i in range(32) if bits >> i & 1))
        start = time.perf_counter()
        for request, token in zip(requests, tokens):
            assert request.accept(token)
        accept += time.perf_counter() - start
    print(f"{args.requests} requests, vocabulary {vocab}: bitmask fill "
          f"{1e3 * fill / args.steps:.2f} ms a step, accepting the tokens "
          f"{1e3 * accept / args.steps:.2f} ms a step ({bitmask.numel() * 4 / 1e6:.1f} MB "
          "of bitmask)")
    grammars.shutdown()


if __name__ == "__main__":
    main()
