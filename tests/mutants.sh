#!/usr/bin/env bash
# Mutation testing of the code that decides which bytes the GPU gets, with
# cargo-mutants (crates.io: `cargo install cargo-mutants --locked`).
# Outside CI. With a warm target directory (CARGO_TARGET_DIR of its own,
# seeded from a normal debug build) a mutant costs 3-10 s on 2 cores: an
# incremental rebuild of kpackfs-core's test binaries and a run of the tests
# selected by name below; a module of 100-300 mutants takes 7-30 min.
# Results go to mutants.out/<name>/ (caught.txt, missed.txt, timeout.txt,
# unviable.txt); the summary is kept in tests/MUTANTS.md.
#
# Usage: bash tests/mutants.sh [MODULE...]     (default: all, in this order)
#   MODULE: target best_for ccob bundle kpack marker wrapper elf coff db cache copies
# Each module runs with the tests that cover it: kpackfs-core's unit tests
# (`--lib`; the integration tests under core/tests are added where they are
# the ones that exercise the module). The end-to-end suite (tests/) is not
# run per mutant: too slow for this machine; tests/tests/oracle.rs covers
# the selection end to end.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo-mutants >/dev/null || { echo "mutants.sh: cargo install cargo-mutants --locked" >&2; exit 2; }
# cargo-mutants copies the whole tree but target/ (its --gitignore cannot
# be combined with --copy-target): bench/work, gigabytes of benchmark
# inputs, would fill the scratch file system.
if [ -d bench/work ]; then
  echo "mutants.sh: bench/work ($(du -sh bench/work | cut -f1)) would be copied for every run: move it out of the tree first" >&2
  exit 2
fi

run() { # name, then cargo-mutants filter arguments
  local name=$1; shift
  echo "== $name"
  mkdir -p "mutants.out/$name"
  # --copy-target: reuse the already-built dependencies of ./target; or
  # set CARGO_TARGET_DIR to a directory of the run's own, where the scratch
  # copy then builds incrementally (with MUTANTS_COPY_TARGET=false when
  # ./target, many GB, is too big to copy: the baseline builds it once).
  # One job (the machine is shared); mutants that hang are cut at 3x the
  # baseline time.
  cargo mutants -p kpackfs-core --test-package kpackfs-core --copy-target="${MUTANTS_COPY_TARGET:-true}" -j 1 \
    --timeout-multiplier 3 --build-timeout-multiplier 3 --no-shuffle \
    -o "mutants.out/$name" "$@" || true
  for f in caught missed timeout unviable; do
    local list="mutants.out/$name/mutants.out/$f.txt"
    printf '%s %s\n' "$f" "$(if [ -f "$list" ]; then wc -l < "$list"; else echo 0; fi)"
  done
}

modules=("$@")
[ ${#modules[@]} -gt 0 ] || modules=(target best_for ccob bundle kpack marker wrapper elf coff db cache copies)
# Extra cargo-mutants arguments for every module, e.g. to re-run the
# survivors of an earlier run: MUTANTS_EXTRA="-F read_frames" (split at spaces).
read -r -a extra <<< "${MUTANTS_EXTRA:-}"
for m in "${modules[@]}"; do
  case $m in
    target)   run target   -f core/src/formats/target.rs -C --lib "${extra[@]}" ;;
    best_for) run best_for -f core/src/plan/select.rs -f core/src/plan/archive.rs -F 'best_for|plan_archives|build_archive' -C --lib "${extra[@]}" ;;
    # ccob/bundle/kpack: the unit tests of the module (the older ones and
    # the hand-written-oracle mutant_tests.rs) and the golden-vector tests
    # of core/tests/vectors.rs, selected by name; encode/flush/write_bundle
    # only make test data. Classify with tests/mutants_classify.py.
    # every_byte_flip takes 15-20 s per mutant in a debug build: skipped.
    ccob)     run ccob     -f core/src/formats/bundle/ccob.rs -E 'encode|flush' -C --lib -C --test=vectors -C --no-fail-fast "${extra[@]}" -- -- bundle:: ccob fatbin --skip every_byte_flip ;;
    bundle)   run bundle   -f core/src/formats/bundle/mod.rs -E 'write_bundle|BundleError::corrupt' -C --lib -C --test=vectors -C --no-fail-fast "${extra[@]}" -- -- bundle:: ccob fatbin --skip every_byte_flip ;;
    kpack)    run kpack    -f 'core/src/formats/kpack/*.rs' -C --lib -C --test=vectors -C --no-fail-fast "${extra[@]}" -- -- kpack archive marker upstream splitter hostile ;;
    marker)   run marker   -f core/src/formats/marker.rs -C --lib "${extra[@]}" ;;
    wrapper)  run wrapper  -f core/src/formats/wrapper.rs -C --lib "${extra[@]}" ;;
    # elf/coff: the module's unit tests and the reference tool's goldens
    # (core/tests/elf_golden.rs, pe_golden.rs; filters name their tests).
    # coff: pe/ has no unit tests; its tests are pe_golden.rs, pe_headers.rs
    # and pe_transform.rs, all of them run (no name filter).
    elf)      run elf      -f core/src/formats/elf/transform.rs -C --lib -C --test=elf_golden -C --no-fail-fast "${extra[@]}" -- -- formats::elf libk app_ splitter_outputs not_fat old_kernel wrapper_targets hip_section marker_mapping relocations_into zero_paging ;;
    coff)     run coff     -f 'core/src/formats/pe/*.rs' -C --test=pe_golden -C --test=pe_headers -C --test=pe_transform -C --no-fail-fast "${extra[@]}" ;;
    db)       run db       -f 'core/src/plan/db/*.rs' -C --lib "${extra[@]}" -- -- plan::db:: ;;
    # The disk cache's meta and seal, and how an entry is trusted (lookup,
    # compute): its own tests, with hand-made damage and forged seals.
    cache)    run cache    -f core/src/data_cache/meta.rs -f core/src/data_cache/disk.rs -C --lib "${extra[@]}" -- -- data_cache:: ;;
    # Local copies: which opens queue one, which are served from one, and
    # their keys (view/cached.rs, the reads of view/open.rs): the view's
    # copy tests and the content-identity test.
    copies)   run copies   -f core/src/view/cached.rs -f core/src/view/open.rs -F 'attach_copy|copy_key|opened_before|claim|settled|may_copy|process_instance|whole|read_at|passthrough_file|content_digest|content_id' -C --lib "${extra[@]}" -- -- view::copy_tests view::cached ;;
    *) echo "mutants.sh: unknown module $m" >&2; exit 2 ;;
  esac
done
