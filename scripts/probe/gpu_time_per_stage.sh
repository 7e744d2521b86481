#!/usr/bin/env bash
# Run on the GPU machine (after scripts/gpu-prepare here): how much GPU kernel time one evaluation
# takes, and in which stage, for the honest solution of each task of the throughput set, one at a
# time on an idle GPU. NVML's utilisation (the share of time a kernel ran) is sampled every 100 ms
# while `crucible eval` runs; each sample is given to the stage whose time span holds it (spans
# from the result's stage durations, laid end to end from the first sample). Then the compile
# probe (compile_cost.py) for the same pairs, unless NO_COMPILE_PROBE=1. EVAL_ARGS go to every
# `crucible eval` (e.g. "--autotune-budget fast"). Usage: gpu_time_per_stage.sh OUTDIR [TASK...]
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
out=${1:?OUTDIR}; shift
mkdir -p "$out"
bin=${CRUCIBLE_BIN:-.device-carry/crucible}
kb=${KB:-.device-carry/kb}
export CRUCIBLE_PYTHON=${CRUCIBLE_PYTHON:-python3}
export CRUCIBLE_CACHE=${CRUCIBLE_CACHE:-/tmp/crucible-cache}
tasks=("$@")
[ ${#tasks[@]} -gt 0 ] || tasks=(level1/1_Square_matrix_multiplication_ level2/12_Gemm_Multiply_LeakyReLU
  level1/23_Softmax level1/2_Standard_matrix_multiplication_ level2/76_Gemm_Add_ReLU
  level1/6_Matmul_with_large_K_dimension_ level1/8_Matmul_with_irregular_shapes_
  level1/10_3D_tensor_matrix_multiplication)
pairs=()
for t in "${tasks[@]}"; do
  name=${t#*/}
  nvidia-smi --query-gpu=timestamp,utilization.gpu --format=csv,noheader,nounits -lms 100 >"$out/$name.util" &
  sampler=$!
  sleep 0.3
  "$bin" eval --device cuda:0 --task "$kb/$t.py" --candidate "examples/kernelbench/$t.py" \
    --iters 30 --warmup 3 ${EVAL_ARGS:-} --json >"$out/$name.json" 2>"$out/$name.err"
  sleep 0.3
  kill "$sampler"; wait "$sampler" 2>/dev/null
  pairs+=("$kb/$t.py" "examples/kernelbench/$t.py")
done
python3 - "$out" "${tasks[@]}" <<'PY'
import datetime, json, sys
out, tasks = sys.argv[1], sys.argv[2:]
def parse(line):
    ts, util = [s.strip() for s in line.split(",")]
    return datetime.datetime.strptime(ts, "%Y/%m/%d %H:%M:%S.%f").timestamp(), float(util)
for t in tasks:
    name = t.split("/", 1)[1]
    try:
        r = json.load(open(f"{out}/{name}.json"))
        samples = [parse(l) for l in open(f"{out}/{name}.util") if l.strip() and "," in l]
    except Exception as e:
        print(f"{name}: no result ({e})"); continue
    # The evaluation ended 0.3 s before the last sample; its stages are laid back from there.
    spans, at = [], samples[-1][0] - 0.3 - r["wall_s"]
    for st in r["stages"]:
        spans.append((st["name"], at, at + st["duration_s"])); at += st["duration_s"]
    per = {}
    for i, (ts, u) in enumerate(samples):
        dt = samples[i + 1][0] - ts if i + 1 < len(samples) else 0.1
        stage = next((n for n, a, b in spans if a <= ts < b), "(outside)")
        stage = "trials" if stage.startswith("trial_") and stage != "trial_0" else stage
        per[stage] = per.get(stage, 0) + u / 100 * dt
    total = sum(per.values())
    top = ", ".join(f"{k} {v:.2f}" for k, v in sorted(per.items(), key=lambda kv: -kv[1]) if v >= 0.01)
    print(f"{name:40s} {r['verdict']:9s} wall {r['wall_s']:6.2f} s  GPU busy {total:5.2f} s: {top}")
PY
[ "${NO_COMPILE_PROBE:-0}" = 1 ] || python3 scripts/probe/compile_cost.py "${pairs[@]}" | tee "$out/compile.jsonl"
