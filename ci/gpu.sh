#!/usr/bin/env bash
# The GPU check of pagoda-cuda: one command on an NVIDIA machine, from the repository root.
#
#   bash ci/gpu.sh [all|tests|bench] [A B C D E F G L M N P Q R S U V W X]  (default: all; A-F)
#   bash ci/gpu.sh cudatests | kerneltests    (the two halves of tests)
#   bash ci/gpu.sh quanttests | quantbench [ci/bench_quant_kernels.py arguments]
#   bash ci/gpu.sh nativetests  (the CUDA C++ kernels' tests and their conformance kit alone)
#   bash ci/gpu.sh install      (the packages alone, for commands of one's own after it)
#   bash ci/gpu.sh attnbench [ci/bench_attention_kernels.py arguments]
#   bash ci/gpu.sh roofline    (ci/read_roofline.cu: how long reading each matmul's weight takes)
#   bash ci/gpu.sh multigpu     (a machine of 2+ GPUs: the NCCL tests, then benchmarks T Y Z)
#
# 1. installs core, pagoda-server, pagoda-cpu and pagoda-cuda in editable mode, without
#    dependencies, into the machine's python ($PYTHON, default python3). torch, triton,
#    transformers, tokenizers, pluggy, numpy, tqdm, httpx, prometheus_client, pytest must be
#    there already (the H200 image has them); what it lacks (fastapi, uvicorn, pydantic, ...)
#    comes from wheels in .whl/ when that folder exists (see docs/benchmarks.md);
# 2. tests: tests/platforms/cuda (the @pytest.mark.cuda ones run on the GPU) and tests/kernels
#    (the Triton kernels natively on the GPU);
# 3. bench: ci/gpu_bench.py, benchmarks A-F of docs/benchmarks.md, each side by side with HF
#    transformers (or with Pagoda offline, for the server), then a table.
#
# Logs and results go to $OUT when set (the device tool's output folder), else a temp dir.
set -euo pipefail
cd "$(dirname "$0")/.."
STAGE=${1:-all}
shift || true
PY=${PYTHON:-python3}
RESULTS=${OUT:-$(mktemp -d)}
mkdir -p "$RESULTS"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
# NVLink multicast stays off, as the lent machines require (their image sets these too).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
status=0

echo "== machine"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
"$PY" -c "import torch, triton, transformers as t; print(f'python3 torch {torch.__version__} \
(CUDA {torch.version.cuda}), triton {triton.__version__}, transformers {t.__version__}')"

echo "== install (editable, no dependencies)"
if compgen -G ".whl/*.whl" > /dev/null; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH} PATH=/tmp/site/bin:$PATH
fi
"$PY" -m pip install -q --no-deps --no-build-isolation --no-index \
    -e core -e server -e platforms/cpu -e platforms/cuda
"$PY" -m pagoda.cli.main plugins

# The whole test stage outlasts one 10-minute call of the device tool: cudatests and
# kerneltests run its halves.
TESTS=()
case $STAGE in
    all|tests) TESTS=(tests/platforms/cuda tests/kernels) ;;
    cudatests) TESTS=(tests/platforms/cuda) ;;
    kerneltests) TESTS=(tests/kernels) ;;
    # Tensor and pipeline parallelism over NCCL, and the certification suite (its all-reduce
    # collective runs only with several GPUs).
    multigpu) TESTS=(tests/platforms/cuda/test_cuda_multi_gpu.py
                     "tests/platforms/cuda/test_cuda_gpu.py::test_certification_suite") ;;
esac
TEST_ENV=()
if [[ $STAGE == multigpu ]]; then
    # Tensor-parallel decode steps in CUDA graphs with NCCL's all-reduce inside: tried here,
    # and the tests' small all-reduces over symmetric memory (pagoda_cuda.all_reduce).
    export PAGODA_CUDA_TP_GRAPHS=1
    TEST_ENV=(PAGODA_CUDA_SYMM_ALL_REDUCE=1)
fi
if (( ${#TESTS[@]} )); then
    echo "== tests"
    env "${TEST_ENV[@]}" "$PY" -m pytest -p no:cacheprovider -rs \
        --durations=15 "${TESTS[@]}" \
        2>&1 | tee "$RESULTS/pytest.log" || status=1
fi

if [[ $STAGE == all || $STAGE == bench ]]; then
    echo "== benchmarks"
    "$PY" ci/gpu_bench.py "$RESULTS" "$@" || status=1
fi

if [[ $STAGE == multigpu ]]; then
    echo "== multi-GPU benchmarks"
    "$PY" ci/gpu_bench.py "$RESULTS" T Y Z || status=1
fi

if [[ $STAGE == quanttests ]]; then
    echo "== quantized-linear kernel tests"
    "$PY" -m pytest -p no:cacheprovider -rs tests/kernels/test_quant_kernels.py \
        tests/platforms/cuda/test_cuda_gpu.py tests/platforms/cuda/test_cuda_native.py \
        -k "quant or fp8 or int8 or woq or resolve or native" \
        2>&1 | tee "$RESULTS/pytest_quant.log" || status=1
fi

if [[ $STAGE == nativetests ]]; then
    echo "== CUDA C++ kernel tests"
    "$PY" -m pytest -p no:cacheprovider -rs \
        tests/platforms/cuda/test_cuda_native.py tests/platforms/cuda/test_cuda_gpu.py \
        -k "native or resolve" 2>&1 | tee "$RESULTS/pytest_native.log" || status=1
fi

if [[ $STAGE == quantbench ]]; then
    echo "== quantized-linear kernel benchmark"
    "$PY" ci/bench_quant_kernels.py --json "$RESULTS/quant_bench.json" "$@" || status=1
fi

if [[ $STAGE == roofline ]]; then
    echo "== read roofline of one matmul launch"
    nvcc -O3 -std=c++17 -arch=native ci/read_roofline.cu -o "$RESULTS/read_roofline" &&
        "$RESULTS/read_roofline" | tee "$RESULTS/read_roofline.txt" || status=1
fi

if [[ $STAGE == attnbench ]]; then
    echo "== paged attention kernel benchmark"
    "$PY" ci/bench_attention_kernels.py --json "$RESULTS/attention_bench.json" "$@" || status=1
fi

echo "== results in $RESULTS"
exit $status
