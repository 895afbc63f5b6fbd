#!/usr/bin/env bash
# tests/shim/run-torch.sh [-n "2 4"] [-s STEPS] BUILD_DIR|SHIM_SO
#
# PyTorch on the GPU through the NCCL shim: preloads libringcc_nccl.so (BUILD_DIR/tools/nccl/, or
# the path given) and runs, for each process count (default "2 4"; all processes share GPU 0),
# tests/shim/torch_collectives.py (every collective torch maps to NCCL, checked) and
# tests/shim/torch_ddp.py (DDP for STEPS steps, default 300, against single-process training).
# Exit status 0 when all passed, 77 when skipped (no torch, or no CUDA device: the reason is
# printed), else 1. Each run is limited to RCC_TORCH_TIMEOUT seconds (default 150). The ranks
# meet on loopback (RCC_SOCKET_IFNAME=lo unless set) with RCC_TIMEOUT=60 unless set.
set -u
usage() { sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
ranks="2 4" steps=300
while getopts "n:s:h" opt; do
    case $opt in
    n) ranks=$OPTARG ;;
    s) steps=$OPTARG ;;
    *) usage ;;
    esac
done
shift $((OPTIND - 1))
[ $# -eq 1 ] || usage
shim=$1
[ -d "$shim" ] && shim=$shim/tools/nccl/libringcc_nccl.so
[ -f "$shim" ] || { echo "no shim at $shim (build it first)"; exit 1; }
shim=$(cd "$(dirname "$shim")" && pwd)/$(basename "$shim")
here=$(cd "$(dirname "$0")" && pwd)
python=${PYTHON:-python3}

# Asked without the shim, so that a broken shim cannot make this look like a skip.
why=$("$python" -c 'import torch
print("" if torch.cuda.is_available() else "torch.cuda.is_available() is False")' 2>&1 | tail -n 1)
if [ -n "$why" ]; then
    echo "SKIP: PyTorch with CUDA is not usable here: $why"
    exit 77
fi

export LD_PRELOAD="$shim${LD_PRELOAD:+:$LD_PRELOAD}"
export RCC_SOCKET_IFNAME=${RCC_SOCKET_IFNAME:-lo} RCC_TIMEOUT=${RCC_TIMEOUT:-60}
limit=${RCC_TORCH_TIMEOUT:-150}
status=0
for n in $ranks; do
    for run in "torch_collectives.py --nprocs $n" "torch_ddp.py --nprocs $n --steps $steps"; do
        start=$(date +%s)
        # shellcheck disable=SC2086 # the run's words
        timeout --kill-after=10 "$limit" "$python" "$here"/$run --require-shim
        rc=$?
        printf '%-8s rc=%-3d %4ds  %s\n' "$([ $rc -eq 0 ] && echo ok || echo FAIL)" "$rc" \
            "$(($(date +%s) - start))" "$run"
        [ $rc -eq 0 ] || status=1
    done
done
exit $status
