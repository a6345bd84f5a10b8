"""`pagoda bench throughput|latency` end to end on a tiny model, both backends, JSON out."""

from __future__ import annotations

import json
import shutil

import pytest

from pagoda.bench.backends import PagodaBackend, RunResult
from pagoda.bench.cli import _run_latency, _run_throughput, _workload
from pagoda.bench.config import LatencyConfig, ThroughputConfig
from pagoda.bench.dataset import random_requests
from pagoda.bench.memory import peak_resident_bytes
from pagoda.bench.stats import percentile
from pagoda.cli.main import main
from pagoda.config import EngineConfig
from tests.engine.tiny_models import make_checkpoint, save_char_tokenizer, tiny_configs


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return make_checkpoint(tmp_path_factory.mktemp("bench"), tiny_configs()["llama"])


def test_throughput_side_by_side_writes_json(model_dir, tmp_path, capsys):
    out = tmp_path / "tp.json"
    rc = main(["bench", "throughput", str(model_dir), "--backend", "pagoda,hf",
               "--dtype", "float32", "--num-prompts", "6", "--input-len", "12",
               "--output-len", "5", "--range-ratio", "0.5", "--output-json", str(out)])
    assert rc == 0
    printed = capsys.readouterr().out
    assert printed.count("Throughput: ") == 2 and "Speed-up pagoda/hf:" in printed
    report = json.loads(out.read_text())
    ours, hf = report["results"]["pagoda"], report["results"]["hf"]
    # Same workload for both: same prompt tokens, and every requested output token.
    assert ours["prompt_tokens"] == hf["prompt_tokens"]
    assert ours["output_tokens"] == hf["output_tokens"]
    requests = random_requests(6, 12, 5, 256, 0.5, 0, frozenset({0, 1, 2}))
    assert ours["output_tokens"] == sum(r.output_len for r in requests)
    assert report["speedup"]["pagoda/hf"] == pytest.approx(
        ours["output_tokens_per_s"] / hf["output_tokens_per_s"])
    # Peak resident memory of this process, which holds both engines (torch alone is over
    # 100 MiB; the kernel's per-thread page counts lag by up to a few hundred pages).
    assert printed.count("Peak resident memory: ") == 2
    for result in (ours, hf):
        assert 100 * 2**20 <= result["peak_resident_bytes"] <= peak_resident_bytes() + 2**20


def test_throughput_warms_up_with_other_prompts_of_the_same_lengths(model_dir):
    """The untimed warm-up runs num_warmup_prompts requests through the engine before the
    timed ones, with other prompts: the timed run finds none of its blocks cached."""
    bench = ThroughputConfig(num_prompts=3, num_warmup_prompts=2, input_len=40, output_len=3)
    backend = PagodaBackend(EngineConfig.from_kwargs(model=str(model_dir), dtype="float32"),
                            bench)
    stats = backend.llm.engine.core.kv_cache.stats
    _run_throughput(bench, 0, [backend])
    both = stats.queries
    backend.run(_workload(bench, backend, 1, seed=9))  # what one prompt queries
    assert both == 5 * (stats.queries - both) > 0
    assert stats.hits == 0
    with pytest.raises(ValueError, match="num_warmup_prompts"):
        ThroughputConfig(num_warmup_prompts=-1)


def test_latency_reports_percentiles(model_dir, tmp_path, capsys):
    out = tmp_path / "lat.json"
    rc = main(["bench", "latency", str(model_dir), "--dtype", "float32", "--batch-size", "2",
               "--input-len", "8", "--output-len", "4", "--num-iters", "3",
               "--output-json", str(out)])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "Avg latency:" in printed and "Peak resident memory: " in printed
    report = json.loads(out.read_text())["results"]["pagoda"]
    assert 100 * 2**20 <= report["peak_resident_bytes"] <= peak_resident_bytes() + 2**20
    lat = report["latency_s"]
    assert 0 < lat["p10"] <= lat["p50"] <= lat["p99"]
    # From each request's own timestamps: its first token, then three more at tpot each,
    # all inside the batch's latency.
    first, tpot = report["first_token_latency_s"], report["time_per_output_token_s"]
    assert first > 0 and tpot > 0
    assert first + 3 * tpot <= lat["mean"]


class _TimedBackend:
    """Stands in for a backend that keeps no per-token timestamps (as HF's) and compiles
    each request shape on its first run: 1 s the first time, then 1 ms a token."""

    name, description, vocab_size = "fake", "compiles each shape once", 100

    def __init__(self):
        self.seen = set()

    def run(self, requests):
        shape = (len(requests), requests[0].output_len)
        elapsed = 1e-3 * sum(r.output_len for r in requests) + (shape not in self.seen)
        self.seen.add(shape)
        outputs = sum(r.output_len for r in requests)
        return RunResult(elapsed, 8 * len(requests), outputs, len(requests))


def test_latency_warms_up_the_prefill_alone_too():
    """Without per-token timestamps the first token comes from one-token runs (the
    prefill), warmed up like the whole ones: a first compilation never lands in the
    first-token figure and so in the time per token."""
    bench = LatencyConfig(batch_size=2, input_len=8, output_len=5, range_ratio=0.0, num_iters=2)
    report = _run_latency(bench, 0, [_TimedBackend()])["fake"]
    assert report["first_token_latency_s"] == pytest.approx(2e-3)
    assert report["time_per_output_token_s"] == pytest.approx(2e-3)


def test_dataset_lengths_and_no_special_tokens():
    reqs = random_requests(50, 100, 20, 300, 0.2, 7, frozenset({0, 1, 2}))
    assert all(80 <= len(r.prompt_token_ids) <= 120 for r in reqs)
    assert all(16 <= r.output_len <= 24 for r in reqs)
    assert not any(t in (0, 1, 2) for r in reqs for t in r.prompt_token_ids)
    assert reqs == random_requests(50, 100, 20, 300, 0.2, 7, frozenset({0, 1, 2}))


def test_percentile_interpolates():
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile([5.0], 99) == 5.0


def test_both_backends_take_the_same_auto_dtype(model_dir, tmp_path, capsys):
    """Without --dtype, HF runs in the dtype Pagoda chooses: the checkpoint's own (here
    float16, which the CPU runs), not the platform's default."""
    checkpoint = tmp_path / "fp16"
    shutil.copytree(model_dir, checkpoint)
    config = json.loads((checkpoint / "config.json").read_text())
    (checkpoint / "config.json").write_text(json.dumps({**config, "dtype": "float16"}))
    rc = main(["bench", "throughput", str(checkpoint), "--backend", "pagoda,hf",
               "--num-prompts", "2", "--input-len", "4", "--output-len", "2"])
    assert rc == 0
    headers = [line for line in capsys.readouterr().out.splitlines() if line.startswith("== ")]
    assert len(headers) == 2 and all(", float16, " in line for line in headers), headers


def test_throughput_with_a_json_schema_on_every_request(tmp_path, capsys):
    model_dir = make_checkpoint(tmp_path / "model", tiny_configs()["llama"])
    save_char_tokenizer(model_dir)  # characters: JSON can be spelled
    out = tmp_path / "tp.json"
    rc = main(["bench", "throughput", str(model_dir), "--dtype", "float32", "--num-prompts",
               "4", "--input-len", "8", "--output-len", "6", "--structured-output",
               "json-schema", "--output-json", str(out)])
    assert rc == 0
    assert "a JSON schema on every request" in capsys.readouterr().out
    report = json.loads(out.read_text())
    assert report["args"]["structured_output"] == "json-schema"
    assert 0 < report["results"]["pagoda"]["output_tokens"] <= 4 * 6
    with pytest.raises(SystemExit, match="hf backend"):
        main(["bench", "throughput", str(model_dir), "--backend", "hf",
              "--structured-output", "json-schema"])


def test_hf_with_a_static_cache(model_dir, tmp_path, capsys):
    """--hf-cache static (HF's strongest mode for a few requests: on a GPU transformers
    compiles the decode step around it) generates every requested token. Both timed runs
    warmed up, 23 more decode steps set the whole run clearly above its first token's,
    whatever else the machine runs."""
    out = tmp_path / "lat.json"
    rc = main(["bench", "latency", str(model_dir), "--backend", "hf", "--hf-cache", "static",
               "--dtype", "float32", "--batch-size", "1", "--input-len", "8",
               "--output-len", "24", "--num-iters", "1", "--num-iters-warmup", "1",
               "--output-json", str(out)])
    assert rc == 0
    assert ", static cache" in capsys.readouterr().out
    report = json.loads(out.read_text())
    assert report["args"]["hf_cache"] == "static"
    hf = report["results"]["hf"]
    assert hf["description"].endswith("static cache")
    assert 0 < hf["first_token_latency_s"] < hf["latency_s"]["mean"]
