#!/usr/bin/env bash
# Long local fuzzing, in the background while other work goes on: every
# cargo-fuzz target in turn (round-robin) for SLICE seconds per turn, JOBS
# targets at once, at the lowest CPU priority, until TOTAL seconds have
# passed. Each finished turn appends "target seconds executions status" to
# LOG, from which the README's fuzzing record is written; a crash stops that
# target's turns and leaves its input in artifacts/TARGET/.
#
#   bash core/fuzz/long.sh TOTAL_SECS [SLICE_SECS=600] [JOBS=2] [LOG=fuzz-long.tsv]
#   TARGETS="kpack pe_plan" bash core/fuzz/long.sh …   (some targets only, in that order)
#
# Same flags as ci.sh (debug assertions: an arithmetic overflow is a crash).
set -euo pipefail
TOTAL=${1:?usage: long.sh TOTAL_SECS [SLICE_SECS] [JOBS] [LOG]}
SLICE=${2:-600}
JOBS=${3:-2}
# LOG is relative to the caller's directory (resolved before the cd).
LOG=$(realpath -m "${4:-fuzz-long.tsv}")
cd "$(dirname "$0")"
command -v cargo-fuzz >/dev/null || cargo install --locked cargo-fuzz
bash seed.sh
export RUSTC_BOOTSTRAP=1
nice -n 19 cargo fuzz build -O -a
end=$(( $(date +%s) + TOTAL ))
# TARGETS="a b" picks (and orders) the targets; default all.
read -ra targets <<< "${TARGETS:-bundle target_id marker kpack elf_plan pe_plan}"
declare -A crashed=()
turn() { # TARGET: one slice; prints the LOG line
  local t=$1 out s0 secs execs status=ok
  out=$(mktemp)
  s0=$(date +%s)
  nice -n 19 cargo fuzz run -O -a "$t" "corpus/$t" -- -max_total_time="$SLICE" -max_len=1048576 \
    -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 > "$out" 2>&1 || status=crash
  secs=$(( $(date +%s) - s0 ))
  execs=$(sed -n 's/^stat::number_of_executed_units: *\([0-9]*\).*/\1/p' "$out" | tail -1)
  [ $status = crash ] && tail -30 "$out" > "crash-$t.log"
  rm -f "$out"
  printf '%s\t%s\t%s\t%s\n' "$t" "$secs" "${execs:-0}" "$status"
}
i=0
while [ "$(date +%s)" -lt "$end" ]; do
  batch=()
  while [ ${#batch[@]} -lt "$JOBS" ] && [ ${#crashed[@]} -lt ${#targets[@]} ]; do
    t=${targets[$(( i % ${#targets[@]} ))]}; i=$((i + 1))
    [ -z "${crashed[$t]:-}" ] && batch+=("$t")
  done
  [ ${#batch[@]} -eq 0 ] && break
  left=$(( end - $(date +%s) ))
  [ "$left" -lt "$SLICE" ] && SLICE=$left
  [ "$SLICE" -lt 30 ] && break
  for t in "${batch[@]}"; do turn "$t" >> "$LOG" & done
  wait
  for t in "${batch[@]}"; do
    if tail -n "$JOBS" "$LOG" | awk -v t="$t" '$1 == t && $4 == "crash"' | grep -q .; then crashed[$t]=1; fi
  done
done
echo "per target: seconds, executions, crashes"
awk -F'\t' '{ s[$1] += $2; e[$1] += $3; if ($4 == "crash") c[$1]++ } END { for (t in s) printf "%-10s %6d s %12d %d\n", t, s[t], e[t], c[t] }' "$LOG"
