#!/usr/bin/env bash
# The GPU check of pagoda-cuda: one command on an NVIDIA machine, from the repository root.
#
#   bash ci/gpu.sh [all|tests|bench]        (default: all)
#
# 1. installs core, pagoda-cpu and pagoda-cuda in editable mode, without dependencies, into
#    the machine's python ($PYTHON, default python3): torch, triton, transformers, tokenizers,
#    pluggy, numpy, tqdm, pytest and pytest-timeout must be there already (the H200 image has
#    them; core imports neither pydantic nor gguf on this path);
# 2. tests: tests/platforms/cuda (the @pytest.mark.cuda ones run on the GPU) and tests/kernels
#    (the Triton kernels natively on the GPU; on a CPU machine they use the interpreter);
# 3. bench: offline throughput on a Llama-3-8B-shaped model with dummy bf16 weights, Pagoda
#    vs HF transformers in one process (Pagoda at PAGODA_GPU_MEMORY_UTILIZATION=0.5 so HF's
#    copy of the weights fits beside it), then a table.
#
# Logs and results go to $OUT when set (the device tool's output folder), else a temp dir.
# Knobs: NUM_PROMPTS (256), INPUT_LEN (128), OUTPUT_LEN (128), HF_BATCH_SIZE (64).
set -euo pipefail
cd "$(dirname "$0")/.."
STAGE=${1:-all}
PY=${PYTHON:-python3}
RESULTS=${OUT:-$(mktemp -d)}
mkdir -p "$RESULTS"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
status=0

echo "== machine"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
"$PY" -c "import torch, triton, transformers as t; print(f'python3 torch {torch.__version__} \
(CUDA {torch.version.cuda}), triton {triton.__version__}, transformers {t.__version__}')"

echo "== install (editable, no dependencies)"
"$PY" -m pip install -q --no-deps --no-build-isolation --no-index \
    -e core -e platforms/cpu -e platforms/cuda
"$PY" -m pagoda.cli.main plugins

if [[ $STAGE == all || $STAGE == tests ]]; then
    echo "== tests"
    "$PY" -m pytest -p no:cacheprovider -rs --durations=15 tests/platforms/cuda tests/kernels \
        2>&1 | tee "$RESULTS/pytest.log" || status=1
fi

if [[ $STAGE == all || $STAGE == bench ]]; then
    echo "== throughput, Llama-3-8B shape, dummy weights"
    model=$(mktemp -d)/llama3-8b
    mkdir -p "$model"
    cp ci/models/llama3-8b/config.json "$model/"
    # The engine loads a tokenizer even for dummy weights; prompts are token ids and outputs
    # are not detokenized, so a 256-word tokenizer stands in for Llama 3's.
    "$PY" - "$model" <<'EOF'
import sys
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

vocab = {"<unk>": 0, "<s>": 1, "</s>": 2} | {f"w{i}": i for i in range(3, 256)}
tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                        unk_token="<unk>").save_pretrained(sys.argv[1])
EOF
    PAGODA_GPU_MEMORY_UTILIZATION=0.5 "$PY" -m pagoda.cli.main bench throughput "$model" \
        --device cuda --load-format dummy --dtype bfloat16 --backend pagoda,hf \
        --num-prompts "${NUM_PROMPTS:-256}" --input-len "${INPUT_LEN:-128}" \
        --output-len "${OUTPUT_LEN:-128}" --hf-batch-size "${HF_BATCH_SIZE:-64}" \
        --output-json "$RESULTS/bench.json" 2>&1 | tee "$RESULTS/bench.log" || status=1
    if [[ -f $RESULTS/bench.json ]]; then
        "$PY" - "$RESULTS/bench.json" <<'EOF'
import json
import sys

run = json.load(open(sys.argv[1]))
args = run["args"]
print(f"\n{args['num_prompts']} prompts x ({args['input_len']} in, {args['output_len']} out)")
print(f"{'backend':<8} {'req/s':>7} {'out tok/s':>10} {'total tok/s':>12} {'mean lat s':>11}  setup")
for name, r in run["results"].items():
    lat = r["request_latency_s"].get("mean", float("nan"))
    print(f"{name:<8} {r['requests_per_s']:>7.2f} {r['output_tokens_per_s']:>10.1f} "
          f"{r['total_tokens_per_s']:>12.1f} {lat:>11.3f}  {r['description']}")
for pair, ratio in run["speedup"].items():
    print(f"speed-up {pair}: {ratio:.2f}x (output tokens/s)")
EOF
    fi
fi

echo "== results in $RESULTS"
exit $status
