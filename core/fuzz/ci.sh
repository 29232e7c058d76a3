#!/usr/bin/env bash
# Fuzzing in CI: builds every cargo-fuzz target (libFuzzer + ASan) and runs
# each for a bounded, short time from the seed corpora, failing on any
# crash. Built with debug assertions (-a): arithmetic overflow is a crash
# too. Long runs happen locally (see README, "Fuzzing record").
# The toolchain is stable: RUSTC_BOOTSTRAP=1 lets it take cargo-fuzz's -Z flags.
set -euo pipefail
cd "$(dirname "$0")"
SECS=${FUZZ_SECS:-20}
command -v cargo-fuzz >/dev/null || cargo install --locked cargo-fuzz
bash seed.sh
export RUSTC_BOOTSTRAP=1
cargo fuzz build -O -a
log=$(mktemp); trap 'rm -f "$log"' EXIT
# Crashers found by long local runs (fixed) are replayed first.
for d in regressions/*/; do
  t=$(basename "$d")
  if ! cargo fuzz run -O -a "$t" "$d"* -- -runs=1 > "$log" 2>&1; then
    tail -40 "$log" >&2
    echo "fuzz regression of $t failed" >&2
    exit 1
  fi
  echo "$t: regressions replayed ($(ls "$d" | wc -l) inputs)"
done
for t in bundle target_id marker kpack elf_plan pe_plan; do
  if ! cargo fuzz run -O -a "$t" "corpus/$t" -- -max_total_time="$SECS" -max_len=1048576 -rss_limit_mb=2048 -timeout=10 > "$log" 2>&1; then
    tail -40 "$log" >&2
    echo "fuzz target $t failed (crash input in core/fuzz/artifacts/$t/)" >&2
    exit 1
  fi
  echo "$t: $(grep -E '^Done' "$log")"
done
echo "fuzz smoke: all targets ran ${SECS}s without a crash"
