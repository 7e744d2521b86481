#!/usr/bin/env bash
# GPU machine, after scripts/gpu-prepare: every process's device memory over time (nvidia-smi,
# about 10 samples a second, host pids with their role) while `$@` runs, into $1. Roles:
# referee (a child of the referee zygote), candidate, zygote, other. Usage:
#   scripts/probe/memory_by_process.sh OUT.tsv COMMAND...
# Lines: unix time, pid, role, MiB. Pair with CRUCIBLE_REFEREE_MEMORY_TRACE's lines ("at").
set -uo pipefail
out=$1
shift
: >"$out"
(
  declare -A role
  while :; do
    now=$(date +%s.%N)
    while IFS=', ' read -r pid mib; do
      [ -n "$pid" ] || continue
      if [ -z "${role[$pid]:-}" ]; then
        args=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)
        parent=$(awk '{print $4}' "/proc/$pid/stat" 2>/dev/null)
        pargs=$(tr '\0' ' ' <"/proc/$parent/cmdline" 2>/dev/null)
        # A forked referee keeps the zygote's command line: its parent tells them apart.
        case "$args|$pargs" in
          *crucible_harness.candidate*) role[$pid]=candidate ;;
          *\|*crucible_harness.zygote*) role[$pid]=referee ;;
          *crucible_harness.zygote*) role[$pid]=zygote ;;
          *crucible_harness.referee*) role[$pid]=referee ;;
          *) role[$pid]=other ;;
        esac
      fi
      printf '%s\t%s\t%s\t%s\n' "$now" "$pid" "${role[$pid]}" "$mib"
    done < <(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits 2>/dev/null)
    sleep 0.05
  done
) >>"$out" &
sampler=$!
"$@"
rc=$?
kill "$sampler" 2>/dev/null
exit $rc
