#!/usr/bin/env bash
# tests/gpu/run-device.sh OUTDIR
#
# For the GPU machine (meson, ninja, nvcc, gcc and python3; no Check, no libibverbs-dev): builds
# ringcc with CUDA in a fresh build folder (build-gpu, at the repository root), runs the test
# suite 'gpu' (kernels; stream forms with 1-4 ranks on the GPU; the device ring; the transport
# conformance suite for cudaipc, built without Check), bench ringcc-kernperf, bench
# ringcc-streamperf and PyTorch through the NCCL shim, and writes the logs into OUTDIR:
#   setup.log build.log        meson setup and ninja
#   info.txt                   ringcc-info: the device as ringcc sees it, and whether a GPU
#                              buffer exports as a dma-buf (GPUDirect RDMA's GPU half; the
#                              summary repeats those lines)
#   gpu-tests.log testlog.txt  meson test --suite gpu (console, and meson's full log)
#   gpu-tests-tcp.log          only when that failed: the suite again with RCC_TRANSPORT=tcp (no
#                              device ring); when it passes, the PyTorch stage runs so too
#   kernperf.txt               ringcc-kernperf (kernel GB/s beside cudaMemcpy D2D GB/s)
#   streamperf-N.txt           ringcc-streamperf on N = 2 and 4 ranks sharing the GPU: allreduce
#                              of device buffers on a stream (GPU to GPU over cudaipc) beside
#                              host buffers (over TCP), up to 256 MiB, with the ring's
#                              memory-traffic bound (bound us, dev/bound)
#   streamperf-R.txt           4 ranks at 256 MiB: R = chunk-2M, chunk-32M (RCC_DEVICE_CHUNK_BYTES),
#                              progress (RCC_DEVICE_PIPELINE=4: the progress-driven device ring,
#                              host pacing, against the default queued at the call; both write
#                              into the next rank's output from 16 MiB: windows)
#   streamperf-window-1M.txt   4 ranks, 1 to 16 MiB, windows (writing into the next rank's
#                              output, mapped per operation) from 1 MiB (RCC_CUDAIPC_WINDOW_BYTES
#                              1M; the default is 16M): beside streamperf-4's rows, what a
#                              per-operation IPC mapping costs against the slots
#   streamperf-tcp-N.txt       streamperf with RCC_TRANSPORT=tcp at 64 and 256 MiB, N = 2 and 4
#                              ranks: device buffers staged over TCP (issue 6's path, 3 rounds
#                              at 4 ranks; issue 7's 5x reference)
#   one-queue-M.txt            streamperf, 2 ranks at 64 MiB with every stream on one hardware
#                              queue (CUDA_DEVICE_MAX_CONNECTIONS=1): M = 3 (auto: chunked, GPU
#                              work queued at the call, over TCP), 0 (staged whole, over TCP),
#                              ring (RCC_DEVICE_PIPELINE=2, the device ring queued at the call: must
#                              run) and progress (4, progress-driven: expected to stall until
#                              RCC_TIMEOUT); their exit statuses in one-queue.txt
#   shim-torch.log             tests/shim/run-torch.sh (skipped where python3 has no CUDA torch)
#   soak-cuda.txt              bench ringcc-soak-cuda: 400 random stream calls on 4 ranks sharing
#                              the GPU, 3 streams each, every result checked (last: where time is
#                              left)
#   summary.txt                what is printed at the end
# Every stage has its own time limit, cut to what is left of RCC_DEVICE_BUDGET (seconds,
# default 450) for the whole script: a stage that would start with under 15 s left is skipped,
# so one hang cannot take the run (the PyTorch stage, next to last, typically takes a minute).
# Ranks run with RCC_TIMEOUT=30 and RCC_STALL_WARN=10 in the benchmark and PyTorch stages, so that a
# stall names its peer before the stage's limit. The device tool returns at most 8 files:
# tests/gpu/device-run.sh wraps this script for it (summary.txt and a logs.tgz). The Check
# suites are left out (-Dcheck=disabled): Check is not installed there. Exit status 0 when
# every stage passed (a test that skipped, e.g. without a device, counts as passed; the summary
# says so).
# RCC_JOBS sets ninja's -j (default: every core).
set -u

if [ $# -ne 1 ] || [ "$1" = "-h" ] || [ "$1" = "--help" ]; then
    sed -n '2,52p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
fi
mkdir -p "$1" || exit 2
out=$(cd "$1" && pwd) || exit 2
root=$(cd "$(dirname "$0")/../.." && pwd) || exit 2
build="$root/build-gpu"
jobs=${RCC_JOBS:-$(nproc 2>/dev/null || echo 4)} # ninja -j (RCC_JOBS overrides)
deadline=$(($(date +%s) + ${RCC_DEVICE_BUDGET:-450}))
status=0
# The benchmark and PyTorch stages: a stall fails (naming the peer) well inside a stage's limit,
# and output is not held back in buffers that a killed stage would lose.
export PYTHONUNBUFFERED=1
perf_env=(RCC_TIMEOUT=30 RCC_STALL_WARN=10)

# stage NAME SECONDS LOG COMMAND...: runs COMMAND under a time limit, output to LOG; records
# a failure (timeout: exit status 124) in the summary.
stage() {
    local name=$1 limit=$2 log=$3 rc start left
    shift 3
    start=$(date +%s)
    left=$((deadline - start - 10))
    if [ "$left" -lt 15 ]; then
        printf '%-10s skipped: the run is out of time (RCC_DEVICE_BUDGET)\n' "$name" \
            | tee -a "$out/summary.txt" "$log"
        return 124
    fi
    [ "$limit" -le "$left" ] || limit=$left
    timeout --kill-after=10 "$limit" "$@" >"$log" 2>&1
    rc=$?
    printf '%-10s rc=%-3d %4ds  %s\n' "$name" "$rc" "$(($(date +%s) - start))" "$log" \
        | tee -a "$out/summary.txt"
    return "$rc"
}

: >"$out/summary.txt"
{
    echo "# ringcc $(git -C "$root" describe --always --dirty 2>/dev/null || echo "${RCC_COMMIT:-(no git; set RCC_COMMIT)}")"
    echo "# $(date -u +%FT%TZ) $(uname -n), kernel $(uname -r)"
    nvcc --version 2>&1 | tail -n 1
    if command -v nvidia-smi >/dev/null; then
        nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1
    else
        echo "(no nvidia-smi)"
    fi
} | tee -a "$out/summary.txt"

rm -rf "$build"
if ! stage setup 120 "$out/setup.log" \
    meson setup "$build" "$root" -Dcuda=enabled -Dcheck=disabled -Dibverbs=disabled; then
    tail -n 20 "$out/setup.log"
    exit 1
fi
if ! stage build 240 "$out/build.log" ninja -C "$build" -j "$jobs"; then
    grep -m 20 -B 2 -A 10 'FAILED' "$out/build.log"
    exit 1
fi
stage info 30 "$out/info.txt" "$build/tools/ringcc-info" || status=1
sed -n '/^Transports/,/^$/p;/^GPUDirect/,/^$/p' "$out/info.txt" | tee -a "$out/summary.txt"
# Per-test limits cut to a fifth of meson.build's (120 s for the longest), so that one hung
# test leaves time for the others.
stage gpu-tests 300 "$out/gpu-tests.log" meson test -C "$build" --no-rebuild --suite gpu \
    --print-errorlogs --timeout-multiplier 0.2 || status=1
cp "$build/meson-logs/testlog.txt" "$out/testlog.txt" 2>/dev/null
# The device ring (cudaipc, issue 7) is made at every init on a GPU host: if it is what fails,
# the suite again without it shows the rest (issue 6's staging over TCP), and the PyTorch stage
# runs without it too, so that one broken transport does not cost the whole device session.
host_only=()
if [ "$status" -ne 0 ]; then
    if stage gpu-tests-tcp 180 "$out/gpu-tests-tcp.log" env RCC_TRANSPORT=tcp \
        meson test -C "$build" --no-rebuild --suite gpu --print-errorlogs \
        --timeout-multiplier 0.2; then
        host_only=(RCC_TRANSPORT=tcp)
        echo "gpu suite passes with RCC_TRANSPORT=tcp: the PyTorch stage runs with it" \
            | tee -a "$out/summary.txt"
    fi
fi
stage kernperf 120 "$out/kernperf.txt" "$build/bench/ringcc-kernperf" -n 100
rc=$?
[ "$rc" -eq 0 ] || [ "$rc" -eq 77 ] || status=1 # 77: skipped (no device), the reason in the log

for n in 2 4; do
    stage "streamperf-$n" 120 "$out/streamperf-$n.txt" env "${perf_env[@]}" \
        "$build/tools/ringcc-run" -n "$n" "$build/bench/ringcc-streamperf" -b 1M -e 256M -f 4 -r 3
    rc=$?
    [ "$rc" -eq 0 ] || [ "$rc" -eq 77 ] || status=1
done
# At 256 MiB, 4 ranks, beside streamperf-4 (8 MiB chunks, queued at the call): 2 MiB and 32 MiB
# device chunks (with slots to match: a queued chunk must fit a slot), and the progress-driven
# device ring (RCC_DEVICE_PIPELINE=4: host pacing) that the queued one replaced.
for run in chunk-2M chunk-32M progress; do
    case $run in
    chunk-2M) settings=(RCC_DEVICE_CHUNK_BYTES=2M) ;;
    chunk-32M) settings=(RCC_DEVICE_CHUNK_BYTES=32M RCC_CUDAIPC_SLOT_BYTES=32M) ;;
    progress) settings=(RCC_DEVICE_PIPELINE=4) ;;
    esac
    stage "streamperf-$run" 45 "$out/streamperf-$run.txt" env "${perf_env[@]}" "${settings[@]}" \
        "$build/tools/ringcc-run" -n 4 "$build/bench/ringcc-streamperf" -b 256M -e 256M -n 5 -w 1 -r 1
    rc=$?
    [ "$rc" -eq 0 ] || [ "$rc" -eq 77 ] || status=1
done
# Windows from 1 MiB instead of 16 MiB: is the per-operation mapping worth it below 16 MiB?
stage "streamperf-window-1M" 45 "$out/streamperf-window-1M.txt" env "${perf_env[@]}" \
    RCC_CUDAIPC_WINDOW_BYTES=1M "$build/tools/ringcc-run" -n 4 "$build/bench/ringcc-streamperf" \
    -b 1M -e 16M -f 4 -r 1
rc=$?
[ "$rc" -eq 0 ] || [ "$rc" -eq 77 ] || status=1
# Over TCP (no device ring): device buffers staged beside host buffers (issue 6's 0.9x at 4
# ranks, 3 rounds), and the reference for the device ring's speed-up (issue 7, 2 and 4 ranks).
for n in 2 4; do
    stage "streamperf-tcp-$n" 90 "$out/streamperf-tcp-$n.txt" env "${perf_env[@]}" \
        RCC_TRANSPORT=tcp "$build/tools/ringcc-run" -n "$n" "$build/bench/ringcc-streamperf" \
        -b 64M -e 256M -f 4 -n 5 -w 1 -r "$((n == 4 ? 3 : 1))"
    rc=$?
    [ "$rc" -eq 0 ] || [ "$rc" -eq 77 ] || status=1
done
# Hardware queues (docs/cuda.md): every stream on one queue, 2 ranks at 64 MiB. Over TCP, auto
# (3) goes chunk by chunk with its GPU work queued at the call and must run, as must staged
# whole (0); so must the device ring (2, cudaipc, queued at the call too). The progress-driven
# device ring (4) is expected to stall until RCC_TIMEOUT fails it (its GPU work queued behind
# the caller's wait). Evidence for the design.
for mode in 3 0 ring progress; do
    transport=tcp pipeline=$mode
    [ "$mode" = ring ] && transport= pipeline=2
    [ "$mode" = progress ] && transport= pipeline=4
    stage "one-queue-$mode" 40 "$out/one-queue-$mode.txt" env RCC_TIMEOUT=10 RCC_STALL_WARN=5 \
        CUDA_DEVICE_MAX_CONNECTIONS=1 RCC_DEVICE_PIPELINE="$pipeline" RCC_TRANSPORT="$transport" \
        "$build/tools/ringcc-run" -n 2 "$build/bench/ringcc-streamperf" -b 64M -e 64M -n 3 -w 1 -r 1
    rc=$?
    echo "one-queue-$mode: exit status $rc" >>"$out/one-queue.txt"
    [ "$mode" = progress ] || [ "$rc" -eq 0 ] || [ "$rc" -eq 77 ] || status=1
done
# torch.distributed (backend nccl) with 2 and 4 processes on GPU 0 through the preloaded shim:
# every collective, then DDP against single-process training; 80 s at most per run.
stage shim-torch 180 "$out/shim-torch.log" \
    env "${perf_env[@]}" "${host_only[@]}" RCC_TORCH_TIMEOUT=40 "$root/tests/shim/run-torch.sh" "$build"
rc=$?
[ "$rc" -eq 0 ] || [ "$rc" -eq 77 ] || status=1 # 77: no torch with CUDA, the reason in the log
# Last, where time is left: the random mix of every stream call (bench/ringcc-soak.c) on the
# GPU, 4 ranks on GPU 0, device, host and mixed buffers on 3 streams each, every result checked.
stage soak-cuda 60 "$out/soak-cuda.txt" env RCC_CUDAIPC_WINDOW_BYTES=1M RCC_STALL_WARN=10 \
    "$build/tools/ringcc-run" -n 4 "$build/bench/ringcc-soak-cuda" --streams 3 --ops 400 \
    --maxbytes 4M --seed 1 --timeout 20
rc=$?
[ "$rc" -eq 0 ] || [ "$rc" -eq 77 ] || status=1

{
    echo "--- gpu suite"
    grep -E '^ *[0-9]+/[0-9]+ |^(Ok|Fail|Skipped|Timeout|Expected Fail|Unexpected Pass):' \
        "$out/gpu-tests.log"
    grep -h -E '^(SKIP:|FAIL |FAIL:|[0-9]+ passed, [0-9]+ failed|.*Checks: )' "$out/testlog.txt" \
        | head -n 30
    echo "--- ringcc-kernperf"
    cat "$out/kernperf.txt"
    for n in 2 4; do
        echo "--- ringcc-streamperf, $n ranks on one GPU"
        cat "$out/streamperf-$n.txt"
    done
    for run in chunk-2M chunk-32M progress; do
        echo "--- ringcc-streamperf, 4 ranks, 256 MiB, $run"
        cat "$out/streamperf-$run.txt"
    done
    echo "--- ringcc-streamperf, 4 ranks, 1-16 MiB, windows from 1 MiB"
    cat "$out/streamperf-window-1M.txt"
    for n in 2 4; do
        echo "--- ringcc-streamperf, $n ranks, RCC_TRANSPORT=tcp"
        cat "$out/streamperf-tcp-$n.txt"
    done
    echo "--- one hardware queue (CUDA_DEVICE_MAX_CONNECTIONS=1), 2 ranks, 64 MiB: auto and staged whole over TCP, the device ring queued (2) and progress-driven (4)"
    cat "$out/one-queue.txt"
    tail -n 5 "$out/one-queue-3.txt" "$out/one-queue-0.txt" "$out/one-queue-ring.txt" \
        "$out/one-queue-progress.txt"
    echo "--- PyTorch through the NCCL shim"
    grep -E '^(ok|FAIL|SKIP|collectives:|ddp:|  skipped:)' "$out/shim-torch.log"
    echo "--- ringcc-soak-cuda, 4 ranks, 400 stream calls on 3 streams each"
    grep -E 'SKIP|# (ops run|bytes moved|wrong elements|time|OK|FAILED)|failed|exited' \
        "$out/soak-cuda.txt" 2>/dev/null | head -n 12
} | tee -a "$out/summary.txt"
exit "$status"
