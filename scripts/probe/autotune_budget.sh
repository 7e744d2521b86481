#!/usr/bin/env bash
# Does a smaller autotuner budget (`--autotune-budget`, judge.rs `AutotuneBudget`) choose worse
# configs? Judges the honest solutions of the GPU benchmark set's tasks (the 8 of
# `bench-throughput`: 7 autotuned matmuls/GEMMs and a softmax) one at a time on an idle GPU,
# ROUNDS times under each budget in BUDGETS, rounds interleaved, and prints per task and budget
# the candidate's median ms per round, the configs the autotuner kept, and the speedups. Run on the
# GPU machine after scripts/gpu-prepare:
#   scripts/probe/autotune_budget.sh [EVAL ARGS]  (OUT, ROUNDS=2, BUDGETS="triton fast", TASKS,
#                                                 DEVICE=cuda:0)
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
out=${OUT:-/tmp/autotune-budget}
mkdir -p "$out"
bin=${CRUCIBLE_BIN:-.device-carry/crucible}
export CRUCIBLE_PYTHON=${CRUCIBLE_PYTHON:-python3}
export CRUCIBLE_CACHE=${CRUCIBLE_CACHE:-/tmp/crucible-cache}
kb=${KERNELBENCH:-.device-carry/kb}
device=${DEVICE:-cuda:0}
rounds=${ROUNDS:-2}
read -r -a budgets <<<"${BUDGETS:-triton fast}"
read -r -d "" -a tasks <<<"${TASKS:-level1/1_Square_matrix_multiplication_ level2/12_Gemm_Multiply_LeakyReLU
  level1/23_Softmax level1/2_Standard_matrix_multiplication_ level2/76_Gemm_Add_ReLU
  level1/6_Matmul_with_large_K_dimension_ level1/8_Matmul_with_irregular_shapes_
  level1/10_3D_tensor_matrix_multiplication}" || true
# Further arguments go to `crucible eval` (e.g. --no-prewarm: no next pair starting beside).
pairs=$(mktemp -d)
mkdir -p "$pairs/tasks" "$pairs/candidates"
for t in "${tasks[@]}"; do
  cp "$kb/$t.py" "$pairs/tasks/"
  cp "examples/kernelbench/$t.py" "$pairs/candidates/"
done
rm -f "$out"/budget_*.jsonl
for round in $(seq "$rounds"); do
  for budget in "${budgets[@]}"; do
    # `eval --out` starts its file afresh: one file per round.
    "$bin" eval --device "$device" --task-dir "$pairs/tasks" --candidate-dir "$pairs/candidates" \
      --autotune-budget "$budget" "$@" --out "$out/budget_${budget//\//_}_r$round.jsonl" \
      >/dev/null 2>>"$out/autotune_budget.err" \
      || echo "round $round, budget $budget: eval exited $?" | tee -a "$out/autotune_budget.err"
  done
done
python3 - "$out" "${budgets[@]}" <<'PY' | tee "$out/autotune_budget.txt"
import collections, glob, json, statistics, sys
out, budgets = sys.argv[1], sys.argv[2:]
rows = collections.defaultdict(lambda: collections.defaultdict(list))
for budget in budgets:
    files = sorted(glob.glob(f"{out}/budget_{budget.replace('/', '_')}_r*.jsonl"))
    for line in (line for name in files for line in open(name)):
        r = json.loads(line)
        task = r["task"]["name"].removesuffix(".py")
        t = r.get("timing") or {}
        configs = sorted({l["autotune_config"] for l in r.get("launches", []) if l.get("autotune_config")})
        rows[task][budget].append((r["verdict"], (t.get("candidate") or {}).get("median_ms"),
                                   r.get("speedup"), configs))
print("candidate median ms per round (speedup), by autotuner budget; * = the configs kept differ from the first budget's")
worst = 0.0
for task in sorted(rows):
    print(task)
    first = None
    medians = {}
    for budget in budgets:
        runs = rows[task].get(budget, [])
        cells = []
        for verdict, ms, speedup, configs in runs:
            first = first if first is not None else configs
            mark = "*" if configs != first else ""
            cells.append(f"{ms:.4f} ({speedup:.2f}){mark}" if ms else f"{verdict}{mark}")
        ok = [ms for _, ms, _, _ in runs if ms]
        medians[budget] = statistics.median(ok) if ok else None
        print(f"  {budget:>8}: " + "  ".join(cells))
    base, *others = [medians.get(b) for b in budgets]
    for b, m in zip(budgets[1:], others):
        if base and m:
            worst = max(worst, m / base)
            print(f"  {b} / {budgets[0]}: {m / base:.3f} (median of rounds)")
print(f"slowest ratio of a task's candidate median to the first budget's: {worst:.3f}")
PY
rm -rf "$pairs"
