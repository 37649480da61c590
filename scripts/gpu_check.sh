#!/usr/bin/env bash
# GPU checks for a lent GPU machine (an H200 here), in one call of about 6-8 minutes:
#   1. build the CUDA library (cuda/gpu, sm_90) and the CPU library it extends,
#   2. run the GPU tests (tests/test_cuda_kernels.py, tests/test_cuda_build.py),
#   3. run the rsqrt GPU sweep (entry point owned by reference_impl.studies.rsqrt, if present),
#   4. benchmark forward and forward+backward (reference_impl.studies.bench_gpu) -> docs/data/bench_gpu.json.
# Everything is logged; with $OUT set (the device tool's output folder) the logs and data files are
# copied there (at most 8 files). Each step has its own time limit (110 + 150 + 150 + 170 s at most, under
# the device tool's 600 s per command); a step past its limit gets SIGINT, so pytest still writes its
# results file and the benchmark keeps the cases it finished. A failed step does not stop the next.
# Back on the development machine: copy bench_gpu.json (and rsqrt_gpu.json) into docs/data/, render the
# plots with `python -m reference_impl.studies.bench_gpu --plot-only`, and commit them with the device named.
# Usage: scripts/gpu_check.sh            (PY=python3 OUT=/some/dir scripts/gpu_check.sh to override)
set -uo pipefail
cd "$(dirname "$0")/.."
export CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
export MAX_JOBS="${MAX_JOBS:-$(nproc)}"
OUT="${OUT:-build/gpu_check}"
mkdir -p "$OUT" build
# The project's venv when it sees a GPU, else the machine's python3 (the device image's PyTorch).
if [ -z "${PY:-}" ]; then
  if [ -x .venv/bin/python ] && .venv/bin/python -c 'import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    PY=.venv/bin/python
  else
    PY=python3
  fi
fi
SUMMARY="$OUT/summary.txt"
LOG="$OUT/build_and_tests.log"
: >"$SUMMARY"; : >"$LOG"
note() { echo "[gpu_check $(date -u +%H:%M:%S)] $*" | tee -a "$SUMMARY"; }
step() {  # step NAME SECONDS LOGFILE CMD...
  local name=$1 secs=$2 log=$3; shift 3
  local t0=$SECONDS
  timeout --signal=INT --kill-after=20 "$secs" "$@" >>"$log" 2>&1
  local rc=$?
  note "$name: exit $rc after $((SECONDS - t0)) s (limit $secs s)"
  return $rc
}

note "python: $PY ($($PY -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "gpu", torch.cuda.is_available())' 2>&1))"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv >>"$SUMMARY" 2>&1 || note "nvidia-smi failed"
"$CUDA_HOME/bin/nvcc" --version | tail -2 >>"$SUMMARY" 2>&1

step build 110 "$LOG" "$PY" -c 'from reference_impl import cuda_ops; cuda_ops.ensure_loaded(); print("normlab CUDA library loaded")'

MARK=$(mktemp)
step gpu-tests 150 "$LOG" "$PY" -m pytest -q -p no:cacheprovider \
  -k "not emulated" tests/test_cuda_kernels.py tests/test_cuda_build.py \
  tests/test_rsqrt_cuda_compiles.py::test_gpu_sweep_on_device  # the CPU emulation ran in make test
if [ -n "$(find build/test-results.json -newer "$MARK" 2>/dev/null)" ]; then
  cp build/test-results.json "$OUT/gpu_test_results.json"
else
  note "the test step wrote no build/test-results.json"
fi
grep -E "passed|failed|error" "$LOG" | tail -3 >>"$SUMMARY"

# rsqrt GPU sweep: owned by the rsqrt study (issue 5). Runs its GPU mode when the module offers one.
if [ -f reference_impl/studies/rsqrt.py ] && "$PY" -m reference_impl.studies.rsqrt --help 2>/dev/null | grep -q -- "--gpu"; then
  step rsqrt-gpu-sweep 150 "$OUT/rsqrt.log" "$PY" -m reference_impl.studies.rsqrt --gpu
  for f in docs/data/rsqrt_gpu*.json; do [ -f "$f" ] && cp "$f" "$OUT/"; done
else
  note "RSQRT GPU SWEEP NOT RUN: no 'python -m reference_impl.studies.rsqrt --gpu' entry point in this checkout"
fi

step bench 170 "$OUT/bench.log" "$PY" -m reference_impl.studies.bench_gpu --out docs/data/bench_gpu.json
cp docs/data/bench_gpu.json "$OUT/" 2>/dev/null || note "no docs/data/bench_gpu.json written"
tail -30 "$OUT/bench.log" | grep -v "bench_gpu:" >>"$SUMMARY" 2>/dev/null
note "done; files in $OUT"
cat "$SUMMARY"
