#!/usr/bin/env bash
# Tests tools/netlab: labs come up shaped, run ranks (3 and 5: odd rings),
# pass failures and timeouts on, and leave nothing behind, also when stopped;
# a job whose cable is pulled fails on every rank, naming the rank cut off.
#
#   test_netlab.sh /path/to/tools/netlab /path/to/ringcc-perf
#
# Exits 77 (skipped) with the reason where labs cannot be made (no root /
# CAP_NET_ADMIN, no iproute2, no tbf). Prints "ok:"/"FAIL:" per check.
# shellcheck disable=SC2016 # $NETLAB_* must expand in the ranks' shells
set -uo pipefail
if [[ $# -ne 2 ]]; then
    echo "usage: $0 NETLAB RINGCC_PERF" >&2
    exit 2
fi
NETLAB=$1
PERF=$2
if ! why=$("$NETLAB" check 2>&1); then
    echo "SKIP: $why"
    exit 77
fi
TMP=$(mktemp -d "${TMPDIR:-/tmp}/test_netlab.XXXXXX")
LAB=tnl$$
LINKLAB=tnlk$$
trap '"$NETLAB" down "$LAB" 2>/dev/null; "$NETLAB" down "$LINKLAB" 2>/dev/null; rm -rf "$TMP"' EXIT
failed=()

check() { # NAME COMMAND... : passes when the command succeeds
    local name=$1
    shift
    if "$@"; then
        echo "ok: $name"
    else
        echo "FAIL: $name"
        failed+=("$name")
    fi
}

# The lab number a `run` used, from its first line ("... rank 0 at 10.77.L.1:port ...").
lab_num_of() { sed -nE 's/.*rank 0 at 10\.77\.([0-9]+)\.1:.*/\1/p' "$1" | head -n 1; }

# Nothing of lab number L is left: no namespaces, no state.
lab_gone() {
    local num=$1
    [[ -n $num ]] || return 1
    ! ip netns list | grep -qE "^nl$num-" && [[ ! -e /run/netlab/.num$num ]]
}

logged() { # OUT COMMAND... : runs it with its output in OUT (shown on failure)
    local out=$1
    shift
    "$@" >"$out" 2>&1 && return 0
    tail -n 20 "$out"
    return 1
}

# 1. Odd rings in shaped and unshaped labs, results checked by ringcc-perf
#    (non-zero exit on any wrong element).
check "3 ranks at 1gbit: allreduce, every dtype, checked" logged "$TMP/r3.out" \
    timeout 300 "$NETLAB" run -n 3 -r 1gbit -- "$PERF" -b 8 -e 1M -f 32 -n 2 -w 1 -d all -o sum
check "5 ranks unshaped: allreduce, every op, checked" logged "$TMP/r5.out" \
    timeout 300 "$NETLAB" run -n 5 -r none -- "$PERF" -b 1 -e 4M -f 16 -n 2 -w 1 -o all
check "5 ranks at 1gbit: allgather, checked" logged "$TMP/r5ag.out" \
    timeout 300 "$NETLAB" run -n 5 -r 1gbit -- "$PERF" -C allgather -b 8 -e 1M -f 64 -n 2 -w 1
check "a finished run leaves no namespace or state" lab_gone "$(lab_num_of "$TMP/r5.out")"

# 2. Failures and timeouts reach the exit status, and the lab still goes.
"$NETLAB" run -n 2 -r none -- sh -c 'exit $((NETLAB_RANK == 1 ? 3 : 0))' >"$TMP/fail.out" 2>&1
check "a rank's failure is the exit status (3)" test $? -eq 3
check "the failing rank is named" grep -q "rank 1 exited with status 3" "$TMP/fail.out"
start=$SECONDS
"$NETLAB" run -n 2 -r none -t 2 -- sleep 60 >"$TMP/timeout.out" 2>&1
st=$?
check "a rank past -t is stopped (124)" test "$st" -eq 124
check "... within seconds" test $((SECONDS - start)) -lt 20
check "... and its lab is gone" lab_gone "$(lab_num_of "$TMP/timeout.out")"

# 3. Stopped from outside (what Ctrl-C does to the whole process group).
"$NETLAB" run -n 2 -r none -- sleep 60 >"$TMP/term.out" 2>&1 &
pid=$!
for _ in $(seq 50); do grep -q "rank 0 at" "$TMP/term.out" 2>/dev/null && break; sleep 0.1; done
sleep 0.5
kill -TERM "$pid"
wait "$pid"
st=$?
check "a stopped run exits 130" test "$st" -eq 130
sleep 0.5
check "... and tears its lab down" lab_gone "$(lab_num_of "$TMP/term.out")"

# 4. A lab that stays: addresses, exec, the rsh stand-in, shaping, down.
check "up" "$NETLAB" up -n 3 -r 100mbit "$LAB"
a1=$("$NETLAB" addr "$LAB" 1)
check "rank 1's address is in its namespace" \
    sh -c "'$NETLAB' exec '$LAB' 1 ip -o -4 addr show lab0 | grep -q ' $a1/'"
check "rsh runs the command line in the namespace that owns the host" \
    sh -c "'$NETLAB' rsh -x '$a1' 'ip -o -4 addr show lab0' | grep -q ' $a1/'"
if command -v iperf3 >/dev/null; then
    "$NETLAB" exec "$LAB" 1 timeout 30 iperf3 -s -1 -p 5299 >/dev/null 2>&1 &
    sleep 0.5
    mbit=$("$NETLAB" exec "$LAB" 0 timeout 30 iperf3 -c "$a1" -p 5299 -t 2 -J 2>/dev/null |
        python3 -c 'import json,sys; print(int(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"] / 1e6))' 2>/dev/null || echo 0)
    wait
    # Wide bounds: this checks that tbf is in place, not how well it shapes.
    check "a 100mbit link carries 50..105 Mbit/s (got $mbit)" test "$mbit" -ge 50 -a "$mbit" -le 105
else
    echo "skip: shaping check (no iperf3)"
fi
lnum=$(sed -nE 's/^lab_num=([0-9]+)$/\1/p' "/run/netlab/$LAB")
check "its buckets: 128 KiB at 100mbit (2 ms at the rate is less)" \
    sh -c "grep -qx 'lab_burst=131072' /run/netlab/$LAB && '$NETLAB' exec '$LAB' 2 tc qdisc show dev lab0 | grep -q 'tbf .*rate 100Mbit burst 128Kb'"
"$NETLAB" up -n 2 -r 1gbit -b 12 "${LAB}b" >"$TMP/burst.out" 2>&1
st=$?
check "a bucket under one frame is refused (status 2), no lab made" \
    sh -c "test $st -eq 2 && grep -q \"bad burst '12'\" '$TMP/burst.out' && test ! -e /run/netlab/${LAB}b"
check "list shows the lab" sh -c "'$NETLAB' list | grep -q '^$LAB: 3 ranks'"
check "down" "$NETLAB" down "$LAB"
check "... removes everything" lab_gone "$lnum"

# 5. A cable pulled in the middle of a job: rank 2's switch port goes down,
#    so nothing (no reset, no notice) reaches anyone across it: the
#    silent-peer path. Every rank must fail within the job's timeout
#    (RCC_TIMEOUT=3) and a margin, the others naming rank 2, and nothing may
#    be left running in the lab.
pulled_names() { # LOG RANK...: the failure line in LOG names one of the ranks
    local log=$1 line
    shift
    line=$(grep -m 1 'failed: ' "$log") || return 1
    echo "  $(basename "$log"): $line"
    for r in "$@"; do
        grep -q "rank $r\b" <<<"$line" && return 0
    done
    return 1
}
lab_empty() { # LAB_NUM N: no process left in any rank's namespace
    local i
    for ((i = 0; i < $2; i++)); do
        [[ -z $(ip netns pids "nl$1-$i" 2>/dev/null) ]] || return 1
    done
}
start_job() { # NAME TIMEOUT ITERS: 256 KiB allreduces in the cable lab, in the
    # background ($pid); returns a second after they began
    "$NETLAB" run -L "$LINKLAB" -t 120 -o "$TMP/$1" -- \
        env RCC_TIMEOUT="$2" "$PERF" -b 256K -e 256K -n "$3" -w 1 >"$TMP/$1.out" 2>&1 &
    pid=$!
    for _ in $(seq 300); do grep -q "^# minBytes" "$TMP/$1/rank0.log" 2>/dev/null && break; sleep 0.1; done
    sleep 1
}
if check "up (4 ranks, 1gbit) for the cable test" "$NETLAB" up -n 4 -r 1gbit "$LINKLAB"; then
    knum=$(sed -nE 's/^lab_num=([0-9]+)$/\1/p' "/run/netlab/$LINKLAB")
    start_job cable 3 1000000
    "$NETLAB" link "$LINKLAB" 2 down
    pulled=$(date +%s.%N)
    wait "$pid"
    st=$?
    took=$(awk -v a="$pulled" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}')
    echo "  the job ended with status $st, $took s after the cable was pulled"
    check "a pulled cable fails the job" test "$st" -ne 0
    check "... within the 3 s timeout and a margin (took $took s)" \
        awk -v t="$took" 'BEGIN {exit !(t <= 10)}'
    for r in 0 1 3; do
        check "... rank $r's error names rank 2" pulled_names "$TMP/cable/rank$r.log" 2
    done
    check "... rank 2's error names another rank" pulled_names "$TMP/cable/rank2.log" 0 1 3
    check "... and no process is left in the lab" lab_empty "$knum" 4
    "$NETLAB" link "$LINKLAB" 2 up

    # An outage shorter than the timeout is ridden out: TCP retransmits once
    # the cable is back, and no rank gives up on a stall it could survive.
    start_job blip 20 1500
    "$NETLAB" link "$LINKLAB" 2 down
    sleep 2
    kill -0 "$pid" 2>/dev/null
    during=$?
    "$NETLAB" link "$LINKLAB" 2 up
    wait "$pid"
    st=$?
    check "a 2 s outage under a 20 s timeout: the job still ran when the cable went back" \
        test "$during" -eq 0
    check "... and the job succeeds (status $st)" test "$st" -eq 0
    check "... with every result right" awk '$1 == 262144 && $8 == "0" {ok = 1} END {exit !ok}' "$TMP/blip.out" # $8: #wrong
    check "... and no process is left in the lab" lab_empty "$knum" 4
    check "down (the cable lab)" "$NETLAB" down "$LINKLAB"
fi

# 6. Bad input: a clear message and status 2, nothing made.
"$NETLAB" up -n 0 "$LAB" >"$TMP/bad1" 2>&1
check "-n 0 is refused" test $? -eq 2
check "... with a message naming it" grep -q "bad rank count '0'" "$TMP/bad1"
"$NETLAB" run -n 2 -r 5parsecs -- true >"$TMP/bad2" 2>&1
check "a bad rate is refused" test $? -eq 2
check "... with a message naming it" grep -q "'5parsecs'" "$TMP/bad2"
"$NETLAB" exec nosuchlab 0 true >"$TMP/bad3" 2>&1
check "an unknown lab is named" grep -q "no lab named 'nosuchlab'" "$TMP/bad3"

if [[ ${#failed[@]} -gt 0 ]]; then
    echo "${#failed[@]} check(s) failed: ${failed[*]}"
    exit 1
fi
echo "all netlab checks passed"
