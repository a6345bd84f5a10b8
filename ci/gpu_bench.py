"""The GPU benchmarks of pagoda-cuda (A-F), each side by side with HF transformers or with
Pagoda's own offline run, with the hardware roofline; prints a table, writes JSON.

    python ci/gpu_bench.py OUT_DIR [A B C D E F]     (default: all)

A  Llama-3-8B shape, 1000 prompts, 128 in / 128 out (pagoda and HF, offline)
B  the same, 1024 in / 128 out
C  the same model, one request at a time, 128 in / 128 out (time per output token)
D  Qwen3-0.6B shape, 256 requests, lengths uniform in 100..1024, temperature 0.6
E  `pagoda bench serve` against `pagoda serve` on workload A, and the offline run beside it
F  start-up of `pagoda serve` with the 8B dummy model to /health answering, Triton cache empty
   and warm, with its imports and its log stamped with seconds since launch
G  the small-batch GEMV kernel against cuBLAS per matmul shape (ci/gemv_bench.py), and C
   with cuBLAS matmuls
M  Qwen3-30B-A3B shape (mixture of experts: 128, 8 a token), 1000 prompts, 128 in / 128 out,
   beside HF transformers
N  the same model, one request at a time, 128 in / 128 out (time per output token), beside HF
P  step profiles: the 8B model with 1000 sequences (A) and one (C), the 0.6B with 256 (D)
R  step profiles of C (one sequence of the 8B model) with bf16, FP8 and INT4 weights
RA step profiles of A (1000 sequences of the 8B model) with FP8 weights, with a bf16 and
   with an FP8 KV cache
Q  quantized weights beside bf16, Pagoda alone: A with FP8 (W8A8, quantized at load), also
   with an FP8 KV cache, and C with FP8 and with INT4 (W4A16, groups of 128); QA and QC
   run its A rows alone and its C rows alone (one call of the device tool each); QF runs
   A with FP8 weights (bf16 and FP8 KV cache) with the norms and SiLU handing the linears
   their inputs quantized, and with those ops passed over
L  LoRA: A (Pagoda alone) with 8 rank-16 adapters of every projection spread over the
   requests, beside the same run without LoRA (ci/bench_lora.py)
S  structured outputs: A (Pagoda alone) with a JSON schema on every request, beside the same
   run without (a stand-in tokenizer with ASCII characters, so JSON can be spelled)
W  dependent launch: C with INT4, bf16 and FP8 weights, each with programmatic dependent
   launch off and on (PAGODA_CUDA_DEPENDENT_LAUNCH=0/1), in one run; `W4` runs INT4 alone;
   `WF-int4` (or WF-bf16, WF-bf16+fp8 ...): C with those weights and dependent launch off,
   for every kernel, for all but the Triton matmuls, and for the matmuls alone
   (`WF-fp8/off,small-native`: the settings named)
U  fused decode layers: C with bf16, FP8 and INT4 weights, each with the layers' norms and
   SiLU run as kernels of their own and computed by the one-row matmuls
   (PAGODA_CUDA_FUSE_DECODE=0/1), in one run
UN C with INT4 weights, the layers op by op (PAGODA_CUDA_FUSE_DECODE=dense) and fused on the
   CUDA C++ kernel, which computes the norms (=native), each with dependent launch off and
   for all but the Triton matmuls
X  C with INT4 weights on Triton's kernels (PAGODA_EXCLUDED_PROVIDERS=woq_linear/cuda_native),
   then on pagoda-cuda's CUDA C++ kernel, in one run; `XF` the same with FP8 weights
   (PAGODA_CUDA_NATIVE_FP8=0, then the kernel where it serves, the default)
V  speculative decoding (ci/bench_speculative.py), each beside no speculation: n-gram
   prompt lookup on the copy-heavy chat workload (the bundled SmolLM2-135M, real weights),
   and one request (128 in, 128 out) of the 8B shape with a Qwen3-0.6B-shape draft of the
   8B's vocabulary, 3 drafts a step (time per output token; dummy weights: drafts are
   rarely accepted, so this is the cost of proposing and verifying)
T  tensor parallelism: A at TP = 1, 2 and 4, C at TP = 1 and 2 (as many GPUs as are visible),
   and C at TP = 2 with the all-reduces over symmetric memory (PAGODA_CUDA_SYMM_ALL_REDUCE=1)
Y  the Llama-3-70B shape at TP = 4: A's workload and one request, against four GPUs' rooflines
Z  the all-reduce of a step's activations over the visible GPUs: NCCL beside PyTorch's
   symmetric-memory one-shot and two-shot all-reduces (the custom all-reduce's candidates),
   eager and in a CUDA graph, per message size (ci/bench_all_reduce.py)

Dummy bf16 weights, random prompts, ignore_eos. Roofline figures use the H200 as measured
(../shared/FACTS.md): bf16 matmul 790 TFLOP/s, device copy 4.24 TB/s.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from pyspy_summary import summarise  # noqa: E402
from stand_in_tokenizer import save_stand_in_tokenizer  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PEAK_FLOPS = 790e12
PEAK_BYTES_PER_S = 4.24e12
PAGODA = [sys.executable, "-m", "pagoda.cli.main"]
# Pagoda shares the GPU with HF's copy of the model in the side-by-side runs.
SHARED_GPU = ("--gpu-memory-utilization", "0.5")
THROUGHPUT = ["--max-num-seqs", "1024", "--max-num-batched-tokens", "8192"]
A_PROMPTS = ["--num-prompts", "1000", "--input-len", "128", "--output-len", "128"]
"""Workload A's requests: 1000 prompts of 128 random tokens, 128 tokens out."""


def model_dir(name: str, json_chars: bool = False) -> Path:
    path = Path(tempfile.mkdtemp()) / name
    path.mkdir()
    shutil.copy(ROOT / "ci" / "models" / name / "config.json", path)
    save_stand_in_tokenizer(path, json_chars)
    return path


def shape(path: Path) -> dict[str, float]:
    """Parameters and per-token costs of a model from its config."""
    c = json.loads((path / "config.json").read_text())
    h, layers, vocab = c["hidden_size"], c["num_hidden_layers"], c["vocab_size"]
    heads, kv = c["num_attention_heads"], c["num_key_value_heads"]
    hd = c.get("head_dim") or h // heads
    mlp = 3 * h * c["intermediate_size"]
    if c.get("num_experts"):  # every layer sparse: the experts a token goes to, the router
        mlp = c["num_experts_per_tok"] * 3 * h * c["moe_intermediate_size"] + h * c["num_experts"]
    per_layer = h * hd * (2 * heads + 2 * kv) + mlp
    matmul_params = layers * per_layer + vocab * h  # the lm_head reads all of it
    return {"matmul_params": matmul_params, "layers": layers, "heads": heads, "head_dim": hd,
            "weight_bytes": 2 * matmul_params, "head_params": vocab * h}


def flops(s: dict[str, float], prompt_len: float, output_len: float) -> float:
    """FLOPs of one request: 2 per weight per token, plus attention (QK and PV) over the
    context each token sees."""
    tokens = prompt_len + output_len
    attention = 4 * s["layers"] * s["heads"] * s["head_dim"] * tokens * tokens / 2
    return 2 * s["matmul_params"] * tokens + attention


def run(cmd: list[str], log: Path, timeout: float = 900,
        env: dict[str, str] | None = None) -> None:
    print("$", " ".join(cmd), flush=True)
    with open(log, "w") as f:
        proc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, timeout=timeout, env=env)
    print(log.read_text()[-2500:], flush=True)
    if proc.returncode:
        raise RuntimeError(f"{cmd[3:5]} failed ({proc.returncode}); see {log}")


def throughput(out: Path, tag: str, model: Path, args: list[str],
               env: dict[str, str] | None = None) -> dict:
    result = out / f"{tag}.json"
    run([*PAGODA, "bench", "throughput", str(model), "--device", "cuda", "--load-format",
         "dummy", "--dtype", "bfloat16", *args, "--output-json", str(result)], out / f"{tag}.log",
        env=env)
    return json.loads(result.read_text())


def offline_row(name: str, run_: dict, s: dict, goal: str) -> dict:
    a = run_["args"]
    mean_in = a["input_len"]
    mean_out = a["output_len"]
    ours = run_["results"]["pagoda"]
    n = ours["num_requests"]
    work = n * flops(s, mean_in, mean_out)
    row = {"benchmark": name, "pagoda out tok/s": ours["output_tokens_per_s"],
           "pagoda total tok/s": ours["total_tokens_per_s"],
           "compute roofline": work / ours["elapsed_s"] / PEAK_FLOPS, "goal": goal}
    if "hf" in run_["results"]:
        row["hf out tok/s"] = run_["results"]["hf"]["output_tokens_per_s"]
        row["ratio"] = run_["speedup"]["pagoda/hf"]
    return row


def bench_a(out: Path, llama: Path, s: dict) -> dict:
    r = throughput(out, "A", llama, ["--backend", "pagoda,hf", *A_PROMPTS,
                                     "--hf-batch-size", "256", *SHARED_GPU, *THROUGHPUT])
    return offline_row("A 8B 1000x(128,128)", r, s, ">= 15000 out tok/s")


def bench_b(out: Path, llama: Path, s: dict) -> dict:
    # HF at batch 256 runs out of memory with 1024-token prompts beside Pagoda's half.
    r = throughput(out, "B", llama, ["--backend", "pagoda,hf", "--num-prompts", "1000",
                                     "--input-len", "1024", "--output-len", "128",
                                     "--hf-batch-size", "64", *SHARED_GPU, *THROUGHPUT])
    return offline_row("B 8B 1000x(1024,128)", r, s, "report vs roofline")


def _latency(out: Path, tag: str, model: Path, backends: str,
             env: dict[str, str] | None = None, extra: tuple[str, ...] = ()
             ) -> dict[str, dict[str, float]]:
    """One request (128 in, 128 out) at a time, per backend: the mean latency, the time to
    the first token, and the time per output token after it; `extra` arguments added and
    `env` added to this process's environment."""
    result = out / f"{tag}.json"
    run([*PAGODA, "bench", "latency", str(model), "--device", "cuda", "--load-format", "dummy",
         "--dtype", "bfloat16", "--backend", backends, "--batch-size", "1", "--input-len",
         "128", "--output-len", "128", "--num-iters", "3", "--num-iters-warmup", "1",
         *extra, "--output-json", str(result)], out / f"{tag}.log",
        env={**os.environ, **env} if env else None)
    return json.loads(result.read_text())["results"]


def latency_row(name: str, r: dict, s: dict, goal: str) -> dict:
    """One request's times beside HF's, and the TPOT its weights' bytes bound it to."""
    ours, hf = r["pagoda"], r.get("hf", {})
    tpot = ours["time_per_output_token_s"]
    bound = s["weight_bytes"] / PEAK_BYTES_PER_S
    return {"benchmark": name, "pagoda TPOT ms": 1e3 * tpot,
            "pagoda latency/128 ms": 1e3 * ours["latency_s"]["mean"] / 128,
            "pagoda TTFT ms": 1e3 * ours["first_token_latency_s"],
            "hf TPOT ms": 1e3 * hf.get("time_per_output_token_s", float("nan")),
            "ratio": hf.get("time_per_output_token_s", float("nan")) / tpot,
            "weights-bound TPOT ms": 1e3 * bound, "bandwidth roofline": bound / tpot,
            "goal": goal}


def bench_c(out: Path, llama: Path, s: dict) -> dict:
    """HF at its strongest for one request: a static cache, around which transformers
    compiles the decode step (torch.compile with CUDA graphs)."""
    return latency_row("C 8B single stream (128,128)",
                       _latency(out, "C", llama, "pagoda,hf",
                                extra=("--hf-cache", "static", *SHARED_GPU)), s,
                       "TPOT <= 4.0 ms")


def bench_m(out: Path, moe: Path, s: dict) -> dict:
    """The Qwen3-30B-A3B shape on A's workload beside HF (its default experts kernel,
    grouped_mm where torch has it; static batches of 128: its 57 GiB of weights share the
    GPU with Pagoda's). The roofline counts the weights a token uses: attention, the head,
    and per layer 8 experts and the router."""
    r = throughput(out, "M", moe, ["--backend", "pagoda,hf", *A_PROMPTS,
                                   "--hf-batch-size", "128", *SHARED_GPU, *THROUGHPUT])
    return offline_row("M Qwen3-30B-A3B 1000x(128,128)", r, s, "report vs HF and roofline")


def bench_n(out: Path, moe: Path, s: dict) -> dict:
    """M's model, one request at a time (C's workload) beside HF."""
    return latency_row("N Qwen3-30B-A3B single stream (128,128)",
                       _latency(out, "N", moe, "pagoda,hf", extra=SHARED_GPU), s,
                       "report vs HF")


def quantized(out: Path, llama: Path, s: dict) -> list[dict]:
    """A and C with quantized weights (`--quantization`, quantized at load from the dummy
    bf16 weights), each beside bf16 in this run (QA and QC: either half alone)."""
    return quantized_a(out, llama, s) + quantized_cs(out, llama, s)


def quantized_a(out: Path, llama: Path, s: dict) -> list[dict]:
    rows = []
    fp8 = ["--quantization", "fp8"]
    for tag, extra, goal in (("bf16", [], "baseline"), ("fp8", fp8, ">= 28000 out tok/s"),
                             ("fp8, fp8 KV cache", [*fp8, "--kv-cache-dtype", "fp8"],
                              "report")):
        r = throughput(out, f"QA-{tag.replace(', ', '-').replace(' ', '')}", llama,
                       ["--backend", "pagoda", *A_PROMPTS, *THROUGHPUT, *extra])
        rows.append(offline_row(f"A {tag}", r, s, goal))
    return rows


UNQUANTIZED_INPUTS = {"PAGODA_EXCLUDED_PROVIDERS": "fused_add_rms_norm_quant/triton,"
                                                   "silu_and_mul_quant/triton"}
"""The norms and the SiLU hand W8A8 linears their outputs in bf16 (passed over: no other
provider offers the quantizing ops, so the linears quantize them themselves)."""


def quantized_inputs_a(out: Path, llama: Path, s: dict) -> list[dict]:
    """A with FP8 weights (bf16 and FP8 KV cache) whose norms and SiLU hand the linears
    their inputs quantized, beside the same runs with those ops passed over."""
    rows = []
    fp8 = ["--quantization", "fp8"]
    for tag, extra in (("fp8", fp8), ("fp8, fp8 KV cache", [*fp8, "--kv-cache-dtype", "fp8"])):
        for inputs, env in (("quantized", None), ("bf16", {**os.environ, **UNQUANTIZED_INPUTS})):
            name = f"QF-{tag.replace(', ', '-').replace(' ', '')}-{inputs}"
            r = throughput(out, name, llama, ["--backend", "pagoda", *A_PROMPTS, *THROUGHPUT,
                                              *extra], env)
            rows.append(offline_row(f"A {tag}, linear inputs {inputs}", r, s, "report"))
    return rows


def quantized_cs(out: Path, llama: Path, s: dict) -> list[dict]:
    goals = {"bf16": ("", "baseline"), "fp8": ("fp8", "TPOT <= 2.4 ms"),
             "int4": ("int4", "TPOT <= 1.6 ms")}
    return [quantized_c(out, llama, s, tag, q, goal) for tag, (q, goal) in goals.items()]


def quantized_c(out: Path, llama: Path, s: dict, tag: str, quantization: str, goal: str,
                env: dict[str, str] | None = None, args: tuple[str, ...] = (),
                name: str | None = None) -> dict:
    """C with `quantization` ("": bf16) weights, with `env` added to the environment and
    `args` to the command; `name` (default: `tag` and the variables' values) names it."""
    extra = (*(("--quantization", quantization) if quantization else ()), *args)
    name = name or tag + "".join(f"-{k.rpartition('_')[2].lower()}{v}"
                                 for k, v in (env or {}).items())
    ours = _latency(out, f"QC-{name}", llama, "pagoda", env, extra)["pagoda"]
    # The LM head stays bf16; int4 adds a float32 scale and offset per 128 weights (the
    # CUDA C++ kernel reads a 16-bit zero point instead of the offset).
    per_weight = {"bf16": 2, "fp8": 1, "int4": 0.5 + (4 + 4) / 128}[tag]
    head = s["head_params"]
    bound = ((s["matmul_params"] - head) * per_weight + 2 * head) / PEAK_BYTES_PER_S
    return {"benchmark": f"C {name}", "pagoda TPOT ms": 1e3 * ours["time_per_output_token_s"],
            "weights-bound TPOT ms": 1e3 * bound,
            "bandwidth roofline": bound / ours["time_per_output_token_s"], "goal": goal}


def dependent_launch(out: Path, llama: Path, s: dict, int4_only: bool = False) -> list[dict]:
    """W: C in INT4 (alone where `int4_only`), bf16 and FP8 weights with dependent launch
    off, then on."""
    weights = (("int4", "int4"),) if int4_only else (("int4", "int4"), ("bf16", ""),
                                                     ("fp8", "fp8"))
    return [quantized_c(out, llama, s, tag, q, "report", {"PAGODA_CUDA_DEPENDENT_LAUNCH": pdl})
            for tag, q in weights for pdl in "01"]


DEPENDENT_SUBSETS = {"off": "0", "all": "1", "small-native": "elementwise,attention,reduce,native",
                     "gemv-native": "gemv,native"}
"""WF's settings of PAGODA_CUDA_DEPENDENT_LAUNCH, by name: none, every kernel, all but the
Triton matmuls, the matmuls alone."""


def dependent_subsets(out: Path, llama: Path, s: dict, key: str) -> list[dict]:
    """WF-<tags>[/<subsets>]: C with the weights of `tags` ("int4", "bf16", "fp8", joined by
    "+") and each of DEPENDENT_SUBSETS (or those named, joined by ",") launched
    dependently."""
    tags, _, names = key.partition("/")
    quantization = {"int4": "int4", "bf16": "", "fp8": "fp8"}
    subsets = names.split(",") if names else list(DEPENDENT_SUBSETS)
    return [quantized_c(out, llama, s, tag, quantization[tag], "report",
                        {"PAGODA_CUDA_DEPENDENT_LAUNCH": DEPENDENT_SUBSETS[label]},
                        name=f"{tag}-pdl-{label}")
            for tag in tags.split("+") for label in subsets]


def native_c(out: Path, llama: Path, s: dict) -> list[dict]:
    """X: C with INT4 weights on Triton's kernels (pagoda-cuda's CUDA C++ provider passed
    over), then on the CUDA C++ kernel (the default)."""
    triton = {"PAGODA_EXCLUDED_PROVIDERS": "woq_linear/cuda_native"}
    return [quantized_c(out, llama, s, "int4", "int4", "report", env, name=f"int4-{name}")
            for name, env in (("triton", triton), ("cuda-native", {}))]


def native_fp8_c(out: Path, llama: Path, s: dict) -> list[dict]:
    """XF: C with FP8 weights on Triton's one-row kernel, then on the CUDA C++ kernel."""
    return [quantized_c(out, llama, s, "fp8", "fp8", "TPOT <= 2.4 ms",
                        {"PAGODA_CUDA_NATIVE_FP8": on}, name=f"fp8-{name}")
            for name, on in (("triton", "0"), ("cuda-native", "1"))]


def fused_decode(out: Path, llama: Path, s: dict) -> list[dict]:
    """U: C in bf16, FP8 and INT4 weights with the decode layers op by op, fused, then fused
    but for the norms (one decode graph, of one sequence: --max-num-seqs 1)."""
    return [quantized_c(out, llama, s, tag, q, "report", {"PAGODA_CUDA_FUSE_DECODE": fused},
                        ("--max-num-seqs", "1"))
            for tag, q in (("bf16", ""), ("fp8", "fp8"), ("int4", "int4"))
            for fused in ("0", "1", "rotary_silu")]


def native_fused(out: Path, llama: Path, s: dict) -> list[dict]:
    """UN: C with INT4 weights, op by op and fused on the CUDA C++ kernel, each with
    dependent launch off and for all but the Triton matmuls."""
    return [quantized_c(out, llama, s, "int4", "int4", "report",
                        {"PAGODA_CUDA_FUSE_DECODE": fuse,
                         "PAGODA_CUDA_DEPENDENT_LAUNCH": DEPENDENT_SUBSETS[pdl]},
                        name=f"int4-{fuse}-pdl-{pdl}")
            for pdl in ("off", "small-native") for fuse in ("dense", "native")]


def visible_gpus() -> int:
    import torch

    return torch.cuda.device_count()


def tensor_parallel(out: Path, llama: Path, s: dict) -> list[dict]:
    """T: A at TP = 1, 2, 4 and C at TP = 1, 2 (as many as the visible GPUs allow), Pagoda
    alone, in one run; rooflines scale with the GPUs."""
    rows = []
    for tp in (t for t in (1, 2, 4) if t <= visible_gpus()):
        r = throughput(out, f"T-A-tp{tp}", llama, [
            "--backend", "pagoda", *A_PROMPTS, "--tensor-parallel-size", str(tp), *THROUGHPUT])
        row = offline_row(f"A TP={tp}", r, s, "report")
        row["compute roofline"] /= tp
        rows.append(row)
    for tp in (t for t in (1, 2) if t <= visible_gpus()):
        rows.append(tp_latency_row(out, f"C TP={tp}", llama, s, tp))
    if visible_gpus() >= 2:  # the decode step's all-reduces over symmetric memory
        rows.append(tp_latency_row(out, "C TP=2 symm all-reduce", llama, s, 2,
                                   {"PAGODA_CUDA_SYMM_ALL_REDUCE": "1"}))
    return rows


def tp_latency_row(out: Path, name: str, model: Path, s: dict, tp: int,
                   env: dict[str, str] | None = None) -> dict:
    """One request (128, 128) on `tp` GPUs (with `env` added to the environment): time per
    output token against the weights' bytes read at `tp` GPUs' bandwidth."""
    tag = name.replace(" ", "-").replace("=", "")
    ours = _latency(out, tag, model, "pagoda", env,
                    extra=("--tensor-parallel-size", str(tp)))["pagoda"]
    tpot = ours["time_per_output_token_s"]
    bound = s["weight_bytes"] / (tp * PEAK_BYTES_PER_S)
    return {"benchmark": name, "pagoda TPOT ms": 1e3 * tpot,
            "pagoda TTFT ms": 1e3 * ours["first_token_latency_s"],
            "weights-bound TPOT ms": 1e3 * bound, "bandwidth roofline": bound / tpot,
            "goal": "report"}


def llama70b(out: Path, big: Path, s: dict) -> list[dict]:
    """Y: the Llama-3-70B shape (dummy weights, 141 GB in bf16) at TP = 4: A's workload and
    one request, against the compute and bandwidth rooflines of four GPUs."""
    if visible_gpus() < 4:
        raise RuntimeError(f"Y needs 4 GPUs, {visible_gpus()} visible")
    r = throughput(out, "Y-A-tp4", big, [
        "--backend", "pagoda", *A_PROMPTS, "--tensor-parallel-size", "4",
        "--gpu-memory-utilization", "0.9", *THROUGHPUT])
    row = offline_row("Y 70B TP=4 1000x(128,128)", r, s, "report")
    row["compute roofline"] /= 4
    return [row, tp_latency_row(out, "Y 70B TP=4 single stream", big, s, 4)]


def all_reduce(out: Path) -> list[dict]:
    """Z: the all-reduce of a step's activations across the visible GPUs
    (ci/bench_all_reduce.py): NCCL and the symmetric-memory all-reduces, eagerly and replayed
    from a CUDA graph, per message size."""
    result = out / "Z.json"
    run([sys.executable, str(ROOT / "ci" / "bench_all_reduce.py"), "--output-json",
         str(result)], out / "Z.log")
    return json.loads(result.read_text())


def bench_l(out: Path, llama: Path) -> dict:
    result = out / "L.json"
    run([sys.executable, str(ROOT / "ci" / "bench_lora.py"), str(llama), str(result),
         "--device", "cuda", "--num-prompts", "1000", "--adapters", "8", "--rank", "16"],
        out / "L.log", timeout=1800)
    r = json.loads(result.read_text())
    return {"benchmark": "L 8B 1000x(128,128), 8 rank-16 adapters",
            "pagoda out tok/s": r["lora"]["output_tokens_per_s"],
            "no-LoRA out tok/s": r["base"]["output_tokens_per_s"],
            "ratio": r["lora/base"], "goal": ">= 0.8 of no LoRA"}


def structured(out: Path, s: dict) -> list[dict]:
    """A, Pagoda alone, without and with a JSON schema on every request."""
    llama = model_dir("llama3-8b", json_chars=True)
    rows = []
    for tag in ("none", "json-schema"):
        r = throughput(out, f"S-{tag}", llama, ["--backend", "pagoda", *A_PROMPTS,
                                                 "--structured-output", tag, *THROUGHPUT])
        rows.append(offline_row(f"A structured output {tag}", r, s,
                                "baseline" if tag == "none" else "loss < 5% of baseline"))
    rows[1]["ratio"] = rows[1]["pagoda out tok/s"] / rows[0]["pagoda out tok/s"]
    return rows


def cublas_c(out: Path, llama: Path) -> dict:
    """C with cuBLAS for every matmul: what the small-batch GEMV kernel is worth."""
    r = _latency(out, "C-cublas", llama, "pagoda",
                 {"PAGODA_REFERENCE_OPS": "linear"}, SHARED_GPU)
    return {"benchmark": "C with cuBLAS matmuls (PAGODA_REFERENCE_OPS=linear)",
            "pagoda TPOT ms": 1e3 * r["pagoda"]["time_per_output_token_s"]}


def bench_d(out: Path, qwen: Path, s: dict) -> dict:
    # Lengths uniform in [100, 1024]: mean 562, range ratio 462/562.
    r = throughput(out, "D", qwen, ["--backend", "pagoda,hf", "--num-prompts", "256",
                                    "--input-len", "562", "--output-len", "562",
                                    "--range-ratio", str(462 / 562), "--temperature", "0.6",
                                    "--hf-batch-size", "128", "--gpu-memory-utilization", "0.3",
                                    *THROUGHPUT])
    return offline_row("D Qwen3-0.6B 256x(100..1024), T=0.6", r, s, ">= 15000 out tok/s")


def wait_ready(url: str, proc: subprocess.Popen, timeout: float) -> None:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if proc.poll() is not None:
            raise RuntimeError(f"pagoda serve exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise TimeoutError("pagoda serve did not become ready")


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _engine_core_pid(server_pid: int) -> int:
    """The `pagoda serve` process's engine-core child (a multiprocessing spawn)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rpartition(")")[2].split()[1])
            cmdline = (stat.parent / "cmdline").read_bytes()
        except (OSError, ValueError):
            continue
        if ppid == server_pid and b"spawn_main" in cmdline:
            return int(stat.parent.name)
    raise RuntimeError("the engine-core process of pagoda serve was not found")


def _py_spy(pid: int, out: Path) -> subprocess.Popen | None:
    """Sample a process's Python stacks (all threads) while the benchmark runs, if py-spy
    is installed and allowed to read the process."""
    if shutil.which("py-spy") is None:
        return None
    return subprocess.Popen(["py-spy", "record", "--nonblocking", "--threads", "--rate", "100",
                             "--format", "raw", "--output", str(out), "--pid", str(pid)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)


def bench_e(out: Path, llama: Path, s: dict) -> list[dict]:
    offline = throughput(out, "E-offline", llama, [*A_PROMPTS, *THROUGHPUT])
    port = 8765
    with open(out / "E-serve.log", "w") as log:
        proc = subprocess.Popen([*PAGODA, "serve", str(llama), "--device", "cuda",
                                 "--load-format", "dummy", "--dtype", "bfloat16", "--port",
                                 str(port), *THROUGHPUT],
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        spies: list[subprocess.Popen] = []
        try:
            wait_ready(f"http://127.0.0.1:{port}", proc, 600)
            core = _engine_core_pid(proc.pid)
            cpu_before = {"front end": _cpu_seconds(proc.pid), "engine core": _cpu_seconds(core)}
            spies = [spy for pid, name in ((proc.pid, "front"), (core, "core"))
                     if (spy := _py_spy(pid, out / f"E-spy-{name}.txt")) is not None]
            result = out / "E.json"
            run([*PAGODA, "bench", "serve", "--url", f"http://127.0.0.1:{port}",
                 *A_PROMPTS, "--request-rate", "inf", "--output-json", str(result)], out / "E.log")
            online = json.loads(result.read_text())
            cpu = {name: _cpu_seconds(pid) - cpu_before[name]
                   for name, pid in (("front end", proc.pid), ("engine core", core))}
            cpu["bench client"] = online["client_cpu_s"]
        finally:
            for spy in spies:
                spy.send_signal(signal.SIGINT)  # py-spy writes its profile and exits
                spy.wait(30)
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(60)
    print((out / "E-serve.log").read_text()[-3000:])
    print(f"CPU seconds during the {online['duration_s']:.1f} s run: "
          + ", ".join(f"{name} {seconds:.1f}" for name, seconds in cpu.items()))
    for name in ("front", "core"):
        profile_ = out / f"E-spy-{name}.txt"
        if profile_.exists():
            print(f"== py-spy, {name}\n{summarise(profile_, 30)}")
    off = offline["results"]["pagoda"]["output_tokens_per_s"]
    e = {"benchmark": "E serve 8B 1000x(128,128), rate inf",
         "pagoda out tok/s": online["output_throughput"], "offline out tok/s": off,
         "online/offline": online["output_throughput"] / off,
         "TTFT ms p50/p99": f"{online['ttft_ms']['median']:.0f}/{online['ttft_ms']['p99']:.0f}",
         "TPOT ms p50/p99": f"{online['tpot_ms']['median']:.1f}/{online['tpot_ms']['p99']:.1f}",
         "CPU s (front/core/client)": "/".join(f"{v:.1f}" for v in cpu.values()),
         "failed": online["failed"], "goal": "online >= 90% of offline"}
    return [e]


def startup(out: Path, llama: Path) -> list[dict]:
    """F: `pagoda serve` of the 8B shape until /health answers, with an empty Triton cache
    (a fresh machine's first start), then warm; its imports, and its log stamped with the
    seconds since launch (ci/startup_profile.py)."""
    log = out / "F.log"
    run([sys.executable, str(ROOT / "ci" / "startup_profile.py"), str(llama), "--device",
         "cuda", "--load-format", "dummy", "--dtype", "bfloat16", *THROUGHPUT], log)
    result = json.loads(log.read_text().splitlines()[-1])
    return [{"benchmark": "F start-up, pagoda serve 8B dummy",
             "seconds to ready, Triton cache empty": result["cold_s"],
             "seconds to ready, warm": result["warm_s"],
             "import torch + CUDA init s": result["imports_s"]["torch + CUDA init"],
             "goal": "<= 20 s"}]


def _profile_step(log: Path, model: Path, seqs: int, *args: str,
                  max_seqs: int | None = None, input_len: int = 128, steps: int = 20) -> None:
    """`ci/profile_step.py` on `model` (dummy bf16 weights on the GPU) into `log`: `seqs`
    sequences of `input_len` random tokens, then `steps` decode steps; `args` added."""
    run([sys.executable, str(ROOT / "ci" / "profile_step.py"), str(model), "--device", "cuda",
         "--load-format", "dummy", "--dtype", "bfloat16", "--num-seqs", str(seqs),
         "--max-num-seqs", str(max_seqs or seqs), "--input-len", str(input_len),
         "--steps", str(steps), *args], log)


def profile(out: Path, llama: Path, qwen: Path) -> list[dict]:
    """Steps of A (1000 sequences: prefill and decode), of C (one sequence) and of D (256
    sequences of the 0.6B model)."""
    for tag, model, seqs, input_len in (("P-A", llama, 1000, 128), ("P-C", llama, 1, 128),
                                        ("P-D", qwen, 256, 562)):
        _profile_step(out / f"{tag}.log", model, seqs, input_len=input_len)
    return []


def profile_quantized_c(out: Path, llama: Path) -> list[dict]:
    """Decode steps of C (one sequence of the 8B shape) in bf16, FP8 and INT4 weights."""
    for quantization in ("none", "fp8", "int4"):
        extra = [] if quantization == "none" else ["--quantization", quantization]
        _profile_step(out / f"R-{quantization}.log", llama, 1, "--rows", "40", *extra)
    return []


def profile_quantized_a(out: Path, llama: Path) -> list[dict]:
    """Prefill and decode steps of A (1000 sequences of the 8B shape) with FP8 weights, with a
    bf16 and with an FP8 KV cache."""
    for cache in ("auto", "fp8"):
        _profile_step(out / f"RA-{cache}.log", llama, 1000, "--quantization", "fp8",
                      "--kv-cache-dtype", cache, max_seqs=1024, steps=10)
    return []


def gemv(out: Path, llama: Path) -> list[dict]:
    """The small-batch GEMV kernel against cuBLAS: per 8B matmul shape (ci/gemv_bench.py),
    and C end to end with cuBLAS instead."""
    run([sys.executable, str(ROOT / "ci" / "gemv_bench.py"), "--json", str(out / "G.json")],
        out / "G.log")
    return [cublas_c(out, llama)]


def draft_dir(target: Path) -> Path:
    """The Qwen3-0.6B shape with the target's vocabulary (size, bos, eos) and tokenizer."""
    path = model_dir("qwen3-0.6b")
    config = json.loads((path / "config.json").read_text())
    vocab = json.loads((target / "config.json").read_text())
    config |= {k: vocab[k] for k in ("vocab_size", "bos_token_id", "eos_token_id")}
    (path / "config.json").write_text(json.dumps(config))
    save_stand_in_tokenizer(path)
    return path


def speculative(out: Path, llama: Path) -> list[dict]:
    """V: n-gram speculation on the copy-heavy workload, and the 8B with a 0.6B-shape draft
    model on one request, each beside plain decoding."""
    dummy = ["--load-format", "dummy", "--dtype", "bfloat16"]
    plans = {
        "V n-gram, copy-heavy chat, SmolLM2-135M, 8 requests": ["--requests", "8"],
        "V 8B + 0.6B-shape draft, one request (128,128), k=3": [
            str(llama), "--method", "draft", "--draft-model", str(draft_dir(llama)), *dummy,
            "--random-prompts", "128", "--requests", "1", "--num-speculative-tokens", "3"],
    }
    rows = []
    for i, (name, args) in enumerate(plans.items()):
        result = out / f"V{i}.json"
        run([sys.executable, str(ROOT / "ci" / "bench_speculative.py"), "--device", "cuda",
             "--max-tokens", "128", "--profile", *args, "--output-json", str(result)],
            out / f"V{i}.log")
        r = json.loads(result.read_text())
        plain, spec = r["plain"], r["speculative"]
        rows.append({"benchmark": name,
                     "plain out tok/s": plain["output_tokens_per_s"],
                     "speculative out tok/s": spec["output_tokens_per_s"],
                     "plain TPOT ms": 1e3 * plain["time_per_output_token_s"],
                     "speculative TPOT ms": 1e3 * spec["time_per_output_token_s"],
                     "accepted": f"{spec['accepted_tokens']} of {spec['draft_tokens']}",
                     "same tokens": f"{r['identical_requests']} of {r['requests']}"})
    return rows


def main() -> int:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    wanted = sys.argv[2:] or list("ABCDEF")
    llama, qwen, moe = model_dir("llama3-8b"), model_dir("qwen3-0.6b"), model_dir("qwen3-30b-a3b")
    big = model_dir("llama3-70b")
    s8, s06, s30 = shape(llama), shape(qwen), shape(moe)
    rows, failures = [], []
    plan = {"P": lambda: profile(out, llama, qwen), "R": lambda: profile_quantized_c(out, llama),
            "RA": lambda: profile_quantized_a(out, llama),
            "A": lambda: [bench_a(out, llama, s8)], "B": lambda: [bench_b(out, llama, s8)],
            "C": lambda: [bench_c(out, llama, s8)], "D": lambda: [bench_d(out, qwen, s06)],
            "E": lambda: bench_e(out, llama, s8), "F": lambda: startup(out, llama),
            "G": lambda: gemv(out, llama), "Q": lambda: quantized(out, llama, s8),
            "QA": lambda: quantized_a(out, llama, s8), "QC": lambda: quantized_cs(out, llama, s8),
            "QF": lambda: quantized_inputs_a(out, llama, s8),
            "M": lambda: [bench_m(out, moe, s30)], "N": lambda: [bench_n(out, moe, s30)],
            "S": lambda: structured(out, s8), "V": lambda: speculative(out, llama),
            "L": lambda: [bench_l(out, llama)], "W": lambda: dependent_launch(out, llama, s8),
            "W4": lambda: dependent_launch(out, llama, s8, int4_only=True),
            "U": lambda: fused_decode(out, llama, s8), "X": lambda: native_c(out, llama, s8),
            "UN": lambda: native_fused(out, llama, s8),
            "XF": lambda: native_fp8_c(out, llama, s8),
            "T": lambda: tensor_parallel(out, llama, s8),
            "Y": lambda: llama70b(out, big, shape(big)), "Z": lambda: all_reduce(out)}
    for key in dict.fromkeys(wanted):
        try:
            if key.startswith("WF-"):  # e.g. WF-int4, WF-bf16+fp8 or WF-fp8/off,all
                rows += dependent_subsets(out, llama, s8, key[3:])
                continue
            rows += plan[key]()
        except Exception as exc:  # one failed benchmark must not hide the others
            failures.append(f"{key}: {exc}")
            print(f"benchmark {key} failed: {exc}", flush=True)
    (out / "benchmarks.json").write_text(json.dumps(rows, indent=2))
    print("\n== results")
    for row in rows:
        print(" | ".join(f"{k}: {v:.3g}" if isinstance(v, float) else f"{k}: {v}"
                         for k, v in row.items()))
    for failure in failures:
        print("FAILED", failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
