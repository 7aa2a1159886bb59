#!/usr/bin/env bash
# The GPU check, one command for whoever holds a GPU (docs/guide/performance.md, "On a GPU").
#
#   benchmarks/gpu/check.sh [OUT]        # OUT: where its logs and record go (default: $OUT, else runs/gpu-check)
#
# On one card, in about 5-8 minutes: trains the MNIST victim on CUDA, runs the CUDA contract tests, the
# GPU step timings (benchmarks/perf/test_gpu_step_perf.py: bare eager and graphed loops, mebench at 1, 3
# and 32 seeds, the oracle), the GPU grid (6 MNIST cells at 1k/10k, `-n 4 --gpus`) and the Random 1M
# cell, then writes OUT/record.json (benchmarks/gpu/record.py). Commit it as
# results/perf/gpu/<device>/record.json (`python benchmarks/gpu/record.py OUT --into results/perf/gpu`);
# `mebench docs` turns it into the performance page's GPU table.
#
# Works on a bare machine with torch and no internet: mebench is installed with
# `pip install --no-deps --no-build-isolation -e .` when missing; data come from $MEBENCH_DATA_ROOT,
# else ./gpu-data (git-ignored: copy MNIST's four .gz files into gpu-data/MNIST/raw/ and carry it).
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
out=${1:-${OUT:-$root/runs/gpu-check}}
mkdir -p "$out"
: > "$out/stages.jsonl"
python -c "import mebench" 2>/dev/null || pip install -q --no-deps --no-build-isolation -e . > "$out/install.log" 2>&1
export MEBENCH_DATA_ROOT=${MEBENCH_DATA_ROOT:-$root/gpu-data}
export MEBENCH_OFFLINE=1
for f in "$MEBENCH_DATA_ROOT"/MNIST/raw/*.gz; do
  [ -e "$f" ] && [ ! -e "${f%.gz}" ] && gunzip -kf "$f"
done

stage() {  # stage NAME LIMIT_S CMD...: run CMD with a time limit, its output in OUT/NAME.log, its wall time in stages.jsonl
  local name=$1 limit=$2; shift 2
  local s e rc
  s=$(date +%s%N)
  timeout "$limit" "$@" > "$out/$name.log" 2>&1
  rc=$?
  e=$(date +%s%N)
  printf '{"stage": "%s", "rc": %d, "wall_ms": %d, "limit_s": %d}\n' "$name" "$rc" $(( (e - s) / 1000000 )) "$limit" >> "$out/stages.jsonl"
  echo "check: $name rc=$rc ($(tail -n 1 "$out/$name.log"))"
}

stage victim 120 python -m mebench victim train configs/victims/mnist_lenet5.yaml --device cuda --no-progress --force
stage cuda_tests 150 python -m pytest contract_tests/test_cuda_paths.py contract_tests/test_graphed_step.py -q -p no:cacheprovider
stage perf 200 python -m pytest benchmarks/perf/test_gpu_step_perf.py --benchmark-only \
  --benchmark-json="$out/gpu_step.json" -q -p no:cacheprovider
stage grid 150 python -m pytest benchmarks/ -n 4 --gpus --mebench-config configs/benchmarks/gpu/mnist.yaml \
  --budgets 1000,10000 --mebench-cells "$out/grid" --overwrite -q -p no:cacheprovider
stage random_1m 240 python -m mebench run configs/scale/mnist_lenet5_random_seed_1m.yaml --seeds 0 --device cuda \
  --out "$out/runs" --no-progress
python benchmarks/gpu/record.py "$out"
