#!/usr/bin/env bash
# RCC_DEBUG, RCC_DEBUG_SUBSYS and RCC_DEBUG_FILE as a user sees them, on a
# 2-rank job: silence by default, the INFO lines of set-up (version,
# features, transport per peer and why, channels, chunk size, interface and
# address) with the host:pid:tid and rank prefix, the subsystem filter, the
# log file per host and pid, and a bad value that warns (and does not hang).
# Usage: test_logging.sh RINGCC_RUN RINGCC_PERF
set -euo pipefail
run=${1:?usage: $0 RINGCC_RUN RINGCC_PERF}
perf=${2:?usage: $0 RINGCC_RUN RINGCC_PERF}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
status=0
fail() { echo "FAIL: $*" >&2; status=1; }
# A failed job shows what it printed: the test's verdict alone does not say why.
job() {
    timeout 60 "$run" -n 2 -t 50 "$perf" -b 64K -e 64K -n 1 -w 0 >"$tmp/out" 2>"$tmp/err" && return 0
    local rc=$?
    echo "job exited with $rc; its stderr ends:" >&2
    tail -n 20 "$tmp/err" >&2
    return $rc
}

job || fail "the default job failed"
grep -q ringcc "$tmp/err" && fail "output on stderr by default: $(cat "$tmp/err")"
echo "ok: nothing logged by default"

RCC_DEBUG=INFO job || fail "the RCC_DEBUG=INFO job failed"
host=$(hostname | cut -d. -f1)
prefix="^\[[01]\] $host:[0-9]+:[0-9]+ ringcc INFO [A-Z]+ \[[01]\] "
grep ' ringcc ' "$tmp/err" | grep -vqE "$prefix" && fail "a line without the host:pid:tid and rank prefix: $(grep ' ringcc ' "$tmp/err" | grep -vE "$prefix" | head -1)"
for want in "INIT \[0\] ringcc [0-9.]+ \(features: CUDA" "chunk [0-9]+ bytes" \
    "INIT \[[01]\] ring: sends to rank [01] .* via tcp \(.+\), receives from rank [01] .* via tcp \(.+\); (1 connection per edge$|[0-9]+ connections per edge \(channels\) for operations of [0-9]+ bytes or more, else 1$)" \
    "INIT \[1\] rank 1 of 2 up: interface [a-z0-9]+, address [0-9.]+:[0-9]+"; do
    grep -qE "$want" "$tmp/err" || fail "RCC_DEBUG=INFO: no line matching '$want'"
done
echo "ok: INFO at set-up"

RCC_DEBUG=INFO RCC_DEBUG_SUBSYS=net job || fail "the RCC_DEBUG_SUBSYS=net job failed"
grep ' ringcc INFO ' "$tmp/err" | grep -vq ' ringcc INFO NET ' && fail "RCC_DEBUG_SUBSYS=net let other subsystems through"
grep -q ' ringcc INFO NET ' "$tmp/err" || fail "RCC_DEBUG_SUBSYS=net: no NET line"
RCC_DEBUG=INFO RCC_DEBUG_SUBSYS=^net job || fail "the RCC_DEBUG_SUBSYS=^net job failed"
grep -q ' ringcc INFO NET ' "$tmp/err" && fail "RCC_DEBUG_SUBSYS=^net let NET through"
grep -q ' ringcc INFO INIT ' "$tmp/err" || fail "RCC_DEBUG_SUBSYS=^net: no INIT line"
echo "ok: RCC_DEBUG_SUBSYS"

RCC_DEBUG=INFO RCC_DEBUG_FILE="$tmp/log-%h-%p.txt" job || fail "the RCC_DEBUG_FILE job failed"
logs=("$tmp"/log-"$host"-*.txt)
[[ ${#logs[@]} == 2 ]] || fail "RCC_DEBUG_FILE: ${#logs[@]} files, expected 2 (one per pid)"
for f in "${logs[@]}"; do
    pid=${f##*-}; pid=${pid%.txt}
    grep -qE "^$host:$pid:[0-9]+ ringcc INFO INIT \[[01]\] " "$f" || fail "$f holds no INFO line of pid $pid"
done
grep -q ' ringcc ' "$tmp/err" && fail "RCC_DEBUG_FILE: lines still on stderr"
echo "ok: RCC_DEBUG_FILE"

RCC_DEBUG=INFO RCC_DEBUG_SUBSYS=bogus job || fail "the RCC_DEBUG_SUBSYS=bogus job failed (or hung)"
grep -q "WARN ENV .*RCC_DEBUG_SUBSYS='bogus'" "$tmp/err" || fail "RCC_DEBUG_SUBSYS=bogus: no warning"
RCC_DEBUG=LOUD job || fail "the RCC_DEBUG=LOUD job failed (or hung)"
grep -q "RCC_DEBUG='LOUD' is not a level" "$tmp/err" || fail "RCC_DEBUG=LOUD: no warning"
echo "ok: bad values warn"
exit $status
