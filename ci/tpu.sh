#!/usr/bin/env bash
# The check of pagoda-tpu on XLA's CPU device (PJRT_DEVICE=CPU): no TPU needed, nor used.
#
#   bash ci/tpu.sh [PYTEST OPTIONS...]     (from anywhere; runs tests/platforms/tpu)
#
# 1. creates .venv-tpu (git-ignored) with pagoda-tpu's pins, torch==2.9.0 and
#    torch-xla==2.9.0, from PyPI (torch 2.9.0 there is the CUDA build: ~4 GB of downloads,
#    7 GB installed, 2-3 minutes); set PAGODA_TPU_TORCH_INDEX (e.g. PyTorch's CPU wheel index)
#    to try that index for torch first, PyPI being the fallback;
# 2. installs core, pagoda-cpu and pagoda-tpu editable without dependencies, then core's own
#    dependencies (from core/pyproject.toml, torch excepted) and pytest;
# 3. runs the tests with PJRT_DEVICE=CPU (XLA_FLAGS defaults to LLVM -O0: faster compiles).
# Steps 1-2 are skipped while .venv-tpu's stamp matches this script and the pyprojects.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.venv-tpu
PY=$VENV/bin/python
STAMP=$VENV/.pagoda-tpu-installed
PINS=(torch==2.9.0 torch-xla==2.9.0)
export PJRT_DEVICE=CPU  # XLA's CPU device, for every step below
# Compiling dominates these tests (every new shape compiles); LLVM -O0 compiles ~3x faster.
export XLA_FLAGS=${XLA_FLAGS:---xla_backend_optimization_level=0}
start=$SECONDS

key=$(cat ci/tpu.sh core/pyproject.toml platforms/cpu/pyproject.toml \
    platforms/tpu/pyproject.toml ci/requirements-test.txt | sha256sum | cut -d' ' -f1)
if [[ -x $PY && -f $STAMP && $(cat "$STAMP") == "$key" ]]; then
    echo "== $VENV is up to date (stamp $STAMP)"
else
    echo "== installing $VENV"
    test -x "$PY" || python3 -m venv "$VENV"
    "$PY" -m pip install -q --upgrade pip "setuptools>=77" wheel
    if [[ -n ${PAGODA_TPU_TORCH_INDEX:-} ]]; then
        "$PY" -m pip install -q --retries 1 --timeout 20 --index-url "$PAGODA_TPU_TORCH_INDEX" \
            "${PINS[0]}" || echo "   $PAGODA_TPU_TORCH_INDEX failed; torch comes from PyPI"
    fi
    "$PY" -m pip install -q "${PINS[@]}"
    "$PY" -m pip install -q --no-deps --no-build-isolation -e core -e platforms/cpu -e platforms/tpu
    "$PY" - > "$VENV/requirements.txt" <<'EOF'
import re
import tomllib

core = tomllib.load(open("core/pyproject.toml", "rb"))["project"]["dependencies"]
tests = [line.strip() for line in open("ci/requirements-test.txt")
         if re.match(r"pytest(-timeout)?\b", line.strip())]
print("\n".join(d for d in core + tests if not d.startswith("torch")))
EOF
    "$PY" -m pip install -q -r "$VENV/requirements.txt" "${PINS[@]}"
    "$PY" -c "import torch, torch_xla; assert torch.__version__.startswith('2.9.0'), torch.__version__"
    echo "$key" > "$STAMP"
    echo "   installed in $((SECONDS - start)) s"
fi

"$PY" -c "import torch, torch_xla, transformers as t; print(f'== python3 torch {torch.__version__}, \
torch_xla {torch_xla.__version__}, transformers {t.__version__}')"
tests_start=$SECONDS
status=0
"$PY" -m pytest -p no:cacheprovider -q -rs --durations=8 \
    tests/platforms/tpu "$@" || status=$?
echo "== tests took $((SECONDS - tests_start)) s; ci/tpu.sh took $((SECONDS - start)) s in all"
exit $status
