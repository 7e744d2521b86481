#!/usr/bin/env bash
# Where does the speedup spread under concurrency come from? In the two-GPU service run (#14),
# copies of one matmul candidate judged on one GPU had candidate medians of 0.59-0.74 ms with the
# same autotuned config, and the timed phases are exclusive on the GPU. The timing window opens
# before the Python forward launches its kernels and closes after a host-side synchronize, so a
# timed process that waits for a CPU is measured slower. This times one candidate REPEATS times on
# DEVICE in three conditions, one evaluation at a time (fresh judge, reference timed each time):
#   alone        an idle machine, the timed processes at the judge's own priority
#   loaded       the same beside one busy process per core (what other evaluations' compiles do)
#   loaded_boost the same, with the judge's default: timed processes at nice -10 while timed
# and prints, per condition, the candidate's and the reference's median ms per run, their spread
# ((max-min)/min) and the speedups'. Run on the GPU machine after scripts/gpu-prepare:
#   scripts/probe/timing_noise.sh [OUTDIR]    (REPEATS=6, DEVICE=cuda:0, TASK, CANDIDATE)
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
out=${1:-${OUT:-/tmp/timing-noise}}
mkdir -p "$out"
# No `+` in the names: the device tool does not bring such files back.
rm -f "$out"/alone.* "$out"/loaded.* "$out"/loaded_boost.*
bin=${CRUCIBLE_BIN:-.device-carry/crucible}
export CRUCIBLE_PYTHON=${CRUCIBLE_PYTHON:-python3}
export CRUCIBLE_CACHE=${CRUCIBLE_CACHE:-/tmp/crucible-cache}
device=${DEVICE:-cuda:0}
repeats=${REPEATS:-6}
task=${TASK:-.device-carry/kb/level1/1_Square_matrix_multiplication_.py}
candidate=${CANDIDATE:-examples/kernelbench/level1/1_Square_matrix_multiplication_.py}
load_pids=()
start_load() {
  for _ in $(seq "$(nproc)"); do python3 -c 'while True: pass' & load_pids+=($!); done
}
stop_load() { kill "${load_pids[@]}" 2>/dev/null; wait "${load_pids[@]}" 2>/dev/null; load_pids=(); }
trap stop_load EXIT
judge() { # CONDITION [eval flags...]
  local condition=$1; shift
  # One file per run: `--out` starts its file afresh.
  for run in $(seq "$repeats"); do
    "$bin" eval --device "$device" --task "$task" --candidate "$candidate" --trials 1 \
      --generalize off --out "$out/$condition.$run.jsonl" "$@" >/dev/null 2>>"$out/$condition.err"
  done
}
judge alone --timed-nice 0
start_load
judge loaded --timed-nice 0
judge loaded_boost
stop_load
python3 - "$out" <<'PY'
import glob, json, statistics, sys
out = sys.argv[1]
def spread(xs):
    return (max(xs) - min(xs)) / min(xs) * 100 if xs else float("nan")
print(f"{'condition':<12} {'runs':>4} {'cand ms median':>14} {'spread':>7} {'ref ms median':>13} {'spread':>7} {'speedup median':>14} {'spread':>7} {'cand cv median':>14}")
for condition in ("alone", "loaded", "loaded_boost"):
    try:
        rs = [json.loads(l) for p in glob.glob(f"{out}/{condition}.*.jsonl") for l in open(p) if l.strip()]
    except OSError:
        continue
    if not rs:
        continue
    timed = [r for r in rs if r.get("timing") and r.get("speedup")]
    cand = [r["timing"]["candidate"]["median_ms"] for r in timed]
    ref = [r["timing"]["reference"]["median_ms"] for r in timed]
    speedup = [r["speedup"] for r in timed]
    cv = [r["timing"]["candidate"].get("cv") or 0 for r in timed]
    med = lambda xs: statistics.median(xs) if xs else float("nan")
    print(f"{condition:<12} {len(timed):>4} {med(cand):>14.4f} {spread(cand):>6.1f}% {med(ref):>13.4f} {spread(ref):>6.1f}% {med(speedup):>14.3f} {spread(speedup):>6.1f}% {med(cv):>14.3f}")
    others = [r["verdict"] for r in rs if r not in timed]
    if others:
        print(f"  not timed: {others}")
PY
