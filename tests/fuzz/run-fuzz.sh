#!/bin/sh
# run-fuzz.sh FUZZER SEEDS WORK SECONDS: fuzzes for SECONDS starting from the
# seed corpus SEEDS (read only) and the inputs kept in WORK/corpus by earlier
# runs; a crash, leak, sanitizer report, slow input (>10 s) or broken
# invariant fails the test and leaves the input in WORK/artifacts.
set -eu
fuzzer=$1 seeds=$2 work=$3 seconds=$4
mkdir -p "$work/corpus" "$work/artifacts"
# libFuzzer's own failure status is 77, which meson reads as SKIP: 1 instead.
exec "$fuzzer" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -error_exitcode=1 -timeout_exitcode=1 \
    -artifact_prefix="$work/artifacts/" "$work/corpus" "$seeds"
