#!/usr/bin/env bash
# ringcc jobs (ringcc.init(), then test_collectives.py's checks) started by launchers other than
# ringcc-run: Open MPI's mpirun (rank and size from OMPI_COMM_WORLD_*) or processes given
# torchrun's variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, ...). Debian's torchrun
# itself fails on Python 3.11 before it starts a worker (torch 1.13's elastic agent), so its
# environment is made here.
#
#   test_launchers.sh mpirun|torchrun PYTHON     (RCC_LIBRARY and PYTHONPATH as for the others)
#
# Exits 0 when every check passed, 1 otherwise, 77 (skip) when mpirun or numpy is missing.
set -euo pipefail

if [[ $# -ne 2 || ($1 != mpirun && $1 != torchrun) ]]; then
    echo "usage: $0 mpirun|torchrun PYTHON" >&2
    exit 2
fi
MODE=$1
PY=$2
HERE=$(cd "$(dirname "$0")" && pwd)
JOB=$HERE/test_collectives.py
TMP=$(mktemp -d "${TMPDIR:-/tmp}/test_launchers.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
# The job must learn its rank from the launcher under test, not from ours.
unset RCC_RANK RCC_NRANKS RCC_ROOT RCC_SECRET RANK WORLD_SIZE MASTER_ADDR MASTER_PORT \
    SLURM_PROCID SLURM_NTASKS OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE
failed=0
if ! "$PY" -c 'import numpy' 2>/dev/null; then
    echo "SKIP: numpy is not installed for $PY"
    exit 77
fi

# A port free now, below the kernel's ephemeral range: rank 0 binds it moments later (as
# under a real mpirun or torchrun), and no socket of a parallel test can be given it
# automatically in between.
free_port() {
    "$PY" - <<'PY'
import random, socket
low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
for _ in range(200):
    port = random.randrange(max(1024, low - 12000), low)
    with socket.socket() as s:
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            continue
    print(port)
    break
else:
    raise SystemExit("no free port below the ephemeral range")
PY
}

# expect_ranks N WHAT: every rank of N printed its success line.
expect_ranks() {
    local r
    for ((r = 0; r < $1; r++)); do
        if ! grep -q "rank $r/$1: every collective matches the reference" "$TMP/out"; then
            echo "FAIL: $2: no success line from rank $r of $1" >&2
            tail -n 30 "$TMP/out" >&2
            failed=1
            return
        fi
    done
    echo "ok: $2"
}

# expect_error WHAT TEXT: the job failed, and its exception carried ringcc's message.
expect_error() {
    if [[ $rc -ne 0 ]] && grep -q "RingccError: RCC_ERR_INVALID_USAGE: .*$2" "$TMP/out"; then
        echo "ok: $1"
    else
        echo "FAIL: $1: exit status $rc, no RingccError naming '$2'" >&2
        tail -n 30 "$TMP/out" >&2
        failed=1
    fi
}

if [[ $MODE == mpirun ]]; then
    if ! command -v mpirun >/dev/null; then
        echo "SKIP: mpirun is not installed (Debian: openmpi-bin)"
        exit 77
    fi
    # Loopback only; the ranks never call MPI_Init, so no byte transport is needed. Unbound:
    # ranks pinned to a core each (the default) would share the 2 cores of a small machine badly.
    mpi=(mpirun --oversubscribe --bind-to none --mca btl self --mca oob_tcp_if_include lo
        -x RCC_LIBRARY -x PYTHONPATH)
    [[ $(id -u) -eq 0 ]] && mpi+=(--allow-run-as-root)
    run() {
        echo "+ $*"
        rc=0
        timeout -k 5 120 "$@" >"$TMP/out" 2>&1 </dev/null || rc=$?
    }

    run "${mpi[@]}" -np 3 -x RCC_ROOT="127.0.0.1:$(free_port)" "$PY" "$JOB"
    expect_ranks 3 "mpirun -np 3, RCC_ROOT (secret from Open MPI's job id)"
    run "${mpi[@]}" -np 2 -x MASTER_ADDR=127.0.0.1 -x MASTER_PORT="$(free_port)" "$PY" "$JOB"
    expect_ranks 2 "mpirun -np 2, MASTER_ADDR and MASTER_PORT"
else
    # torchrun's variables, one process per rank, as torchrun would start them.
    torchrun_job() { # N PORT
        local n=$1 r pids=()
        echo "+ $n ranks with RANK, WORLD_SIZE, MASTER_ADDR=127.0.0.1, MASTER_PORT=$2"
        for ((r = 0; r < n; r++)); do
            RANK=$r LOCAL_RANK=$r WORLD_SIZE=$n LOCAL_WORLD_SIZE=$n GROUP_RANK=0 \
                MASTER_ADDR=127.0.0.1 MASTER_PORT=$2 TORCHELASTIC_RUN_ID=test-$$ \
                timeout -k 5 120 "$PY" "$JOB" >"$TMP/out.$r" 2>&1 </dev/null &
            pids+=($!)
        done
        rc=0
        for r in "${!pids[@]}"; do
            wait "${pids[$r]}" || rc=$?
        done
        cat "$TMP"/out.* >"$TMP/out"
        rm -f "$TMP"/out.*
    }
    torchrun_job 4 "$(free_port)"
    expect_ranks 4 "torchrun's environment, 4 ranks"
    rc=0
    "$PY" -c 'import ringcc; ringcc.init()' >"$TMP/out" 2>&1 </dev/null || rc=$?
    expect_error "no launcher: RingccError" "names no rank"
fi
exit $failed
