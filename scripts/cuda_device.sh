#!/usr/bin/env bash
# One call of a lent GPU machine (the `run` tool): the CUDA backend's checks and figures on twins
# of the real pair (scripts/cuda_device.py says what a twin is and what is measured).
# Before the call, here: `.venv/bin/python scripts/cuda_device.py prep` (makes .gpu/ and .whl/).
# The call:  run(command="bash scripts/cuda_device.sh", carry=[".gpu", ".whl"], timeout_s=540)
# It prints a line per phase and a summary last; $OUT/cuda_device.json and $OUT/log.txt come back.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
if ls .whl/*.whl >/dev/null 2>&1; then       # NumPy below 2.5 (numba-cuda 0.30), gguf, numba-cuda
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/specnb-site .whl/*.whl || exit 3
  export PYTHONPATH=/tmp/specnb-site
fi
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv,noheader
out="${OUT:-/tmp/specnb-device}"
mkdir -p "$out"
python3 scripts/cuda_device.py run --out "$out" "$@" 2>&1 | tee "$out/log.txt"
exit "${PIPESTATUS[0]}"
