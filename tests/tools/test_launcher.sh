#!/usr/bin/env bash
# Tests ringcc-run and ringcc-perf the way a user runs them.
#
#   test_launcher.sh /path/to/ringcc-run /path/to/ringcc-perf
#
# Prints each command it runs and "ok:"/"FAIL:" per check; exits 0 when every check passed,
# 1 otherwise (with the list of failed checks). Every command runs under timeout(1), so a hung
# launcher fails the test instead of hanging it.
#
# The rank commands are single-quoted on purpose: $RCC_RANK must expand in the rank's shell,
# not here.
# shellcheck disable=SC2016
set -euo pipefail

if [[ $# -ne 2 ]]; then
    echo "usage: $0 RINGCC_RUN RINGCC_PERF" >&2
    exit 2
fi
RUN=$1
PERF=$2
TMP=$(mktemp -d "${TMPDIR:-/tmp}/test_launcher.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
# Unique per run, so the orphan checks cannot see another test's sleeps.
MARK="4242.$$"

failed=()
rc=0
elapsed_ms=0

fail() {
    echo "FAIL: $*" >&2
    failed+=("$*")
    if [[ -s $TMP/out || -s $TMP/err ]]; then
        echo "  --- stdout (last 20 lines) ---" >&2
        tail -n 20 "$TMP/out" >&2 || true
        echo "  --- stderr (last 20 lines) ---" >&2
        tail -n 20 "$TMP/err" >&2 || true
    fi
}

pass() {
    echo "ok: $*"
}

now_ms() {
    if [[ -n ${EPOCHREALTIME:-} ]]; then
        local t=${EPOCHREALTIME/[.,]/}
        echo $((10#$t / 1000))
    else
        echo $(($(date +%s%N) / 1000000))
    fi
}

# run SECONDS CMD...: runs CMD with stdout and stderr captured in $TMP/out and $TMP/err; sets
# rc and elapsed_ms. A command still running after SECONDS gets SIGTERM (rc 124), SIGKILL 5 s
# later.
run() {
    local limit=$1
    shift
    echo "+ $(printf '%q ' "$@")"
    local start
    start=$(now_ms)
    rc=0
    timeout -k 5 "$limit" "$@" >"$TMP/out" 2>"$TMP/err" </dev/null || rc=$?
    elapsed_ms=$(($(now_ms) - start))
}

# Pids of live processes whose command line contains $1. Bash builtins only: a grep or pgrep
# would carry the pattern in its own command line and find itself.
procs_with() {
    local p cmd args
    for p in /proc/[0-9]*; do
        [[ $p == "/proc/$$" ]] && continue
        mapfile -d '' -t args 2>/dev/null <"$p/cmdline" || continue
        cmd="${args[*]:-}"
        [[ $cmd == *"$1"* ]] && echo "${p#/proc/}"
    done
    return 0
}

# expect_no_orphans WHAT: no process of the check (marked with $MARK) may outlive the launcher.
# Ranks killed by SIGKILL vanish at once; give the kernel a moment for the ones reparented to
# init.
expect_no_orphans() {
    local left
    for _ in 1 2 3 4 5 6 7 8 9 10; do
        left=$(procs_with "sleep $MARK")
        [[ -z $left ]] && return 0
        sleep 0.2
    done
    fail "$1: processes left running: $(echo "$left" | tr '\n' ' ')"
    return 1
}

expect_rc() { # expect_rc WANT WHAT
    if [[ $rc -ne $1 ]]; then
        fail "$2: exit status $rc, expected $1"
        return 1
    fi
}

expect_in() { # expect_in FILE FIXED-STRING WHAT
    if ! grep -qF -- "$2" "$TMP/$1"; then
        fail "$3: '$2' not in $1"
        return 1
    fi
}

# ------------------------------------------------------------------------------------------
echo "== (a) output, environment, arguments"

run 30 "$RUN" -n 3 sh -c 'echo hi $RCC_RANK'
ok=1
expect_rc 0 "(a) echo" || ok=0
for r in 0 1 2; do
    grep -qxF "[$r] hi $r" "$TMP/out" || { fail "(a) echo: no line '[$r] hi $r'"; ok=0; }
done
[[ $(wc -l <"$TMP/out") -eq 3 ]] || { fail "(a) echo: expected exactly 3 lines"; ok=0; }
[[ $ok -eq 1 ]] && pass "(a) -n 3 prints [0] hi 0 .. [2] hi 2"

run 30 "$RUN" -n 2 sh -c 'echo oops $RCC_RANK >&2'
if expect_rc 0 "(a) stderr" && grep -qxF "[1] oops 1" "$TMP/err" && [[ ! -s $TMP/out ]]; then
    pass "(a) stderr lines go to stderr, prefixed"
else
    fail "(a) stderr: expected '[1] oops 1' on stderr and nothing on stdout"
fi

run 30 "$RUN" -n 2 sh -c 'echo "$RCC_RANK $RCC_NRANKS $RCC_ROOT $RCC_SECRET"'
if expect_rc 0 "(a) env" &&
    grep -qE '^\[0\] 0 2 127\.0\.0\.1:[0-9]+ [0-9a-f]{64}$' "$TMP/out" &&
    grep -qE '^\[1\] 1 2 127\.0\.0\.1:[0-9]+ [0-9a-f]{64}$' "$TMP/out" &&
    [[ $(cut -d' ' -f4,5 "$TMP/out" | sort -u | wc -l) -eq 1 ]]; then
    pass "(a) RCC_RANK, RCC_NRANKS, RCC_ROOT=127.0.0.1:PORT, RCC_SECRET (64 hex) set, shared"
else
    fail "(a) env: unexpected RCC_* variables"
fi

# The port is below the ephemeral range (no auto-bound socket can take it before rank 0).
run 30 "$RUN" -n 1 sh -c 'echo "${RCC_ROOT##*:} $(cut -f1 /proc/sys/net/ipv4/ip_local_port_range)"'
if expect_rc 0 "(a) port" && read -r port low < <(sed 's/^\[0\] //' "$TMP/out") &&
    [[ $port -ge 1024 && $port -lt $low ]]; then
    pass "(a) RCC_ROOT's port ($port) is below the ephemeral range (from $low)"
else
    fail "(a) RCC_ROOT's port is not below the ephemeral range"
fi

run 30 env RCC_ROOT=127.0.0.1:1 RCC_SECRET=00ff "$RUN" -n 2 sh -c 'echo $RCC_ROOT $RCC_SECRET'
if expect_rc 0 "(a) user env" && [[ $(grep -cxE '\[[01]\] 127\.0\.0\.1:1 00ff' "$TMP/out") -eq 2 ]]
then
    pass "(a) RCC_ROOT and RCC_SECRET set by the user are kept"
else
    fail "(a) user env: RCC_ROOT/RCC_SECRET were overridden"
fi

run 30 "$RUN" --no-prefix -n 2 sh -c 'echo plain'
if expect_rc 0 "(a) --no-prefix" && [[ $(grep -cxF plain "$TMP/out") -eq 2 ]]; then
    pass "(a) --no-prefix"
else
    fail "(a) --no-prefix: expected two unprefixed lines"
fi

run 30 "$RUN" -n 2 sh -c 'printf "no newline $RCC_RANK"'
if expect_rc 0 "(a) partial" && grep -qxF "[0] no newline 0" "$TMP/out" &&
    grep -qxF "[1] no newline 1" "$TMP/out"; then
    pass "(a) a partial last line is flushed"
else
    fail "(a) partial last line lost or merged"
fi

# Lines of 4 busy ranks on both streams, up to 3 KB long: none may be cut or mixed.
run 60 "$RUN" -n 4 sh -c 'awk -v r=$RCC_RANK "BEGIN { for (i = 0; i < 400; i++) {
    s = sprintf(\"r%d-%d-\", r, i); n = (i * 97) % 3000;
    for (j = 0; j < n; j++) s = s \"x\"; print s; print s > \"/dev/stderr\" } }"'
bad_out=$(grep -cvE '^\[([0-3])\] r\1-[0-9]+-x*$' "$TMP/out" || true)
bad_err=$(grep -cvE '^\[([0-3])\] r\1-[0-9]+-x*$' "$TMP/err" || true)
if expect_rc 0 "(a) interleaving" && [[ $(wc -l <"$TMP/out") -eq 1600 ]] &&
    [[ $(wc -l <"$TMP/err") -eq 1600 ]] && [[ $bad_out -eq 0 && $bad_err -eq 0 ]]; then
    pass "(a) 4 ranks x 400 long lines on stdout and stderr, none cut or mixed"
else
    fail "(a) interleaving: $(wc -l <"$TMP/out") stdout lines ($bad_out bad)," \
        "$(wc -l <"$TMP/err") stderr lines ($bad_err bad), expected 1600 good each"
fi

for args in "-n 0 true" "-n 1025 true" "-n abc true" "-n 2" "true" "--bogus -n 1 true" \
    "--timeout -1 -n 1 true" "-n"; do
    # shellcheck disable=SC2086 # split on purpose
    run 10 "$RUN" $args
    if expect_rc 2 "(a) bad arguments '$args'" && [[ -s $TMP/err ]]; then
        pass "(a) '$args' is refused with status 2"
    fi
done

run 10 "$RUN" -n 2 no-such-program-$$
expect_rc 127 "(a) missing program" && expect_in err "no-such-program-$$" "(a) missing program" &&
    pass "(a) a missing program gives 127"

run 10 "$RUN" --help
if expect_rc 0 "(a) --help"; then
    ok=1
    for word in RCC_RANK RCC_NRANKS RCC_ROOT RCC_SECRET --timeout --no-prefix SIGTERM; do
        expect_in out "$word" "(a) --help documents $word" || ok=0
    done
    [[ $ok -eq 1 ]] && pass "(a) --help documents options and environment"
fi

# ------------------------------------------------------------------------------------------
echo "== (b) failures, signals, cleanup"

run 10 "$RUN" -n 3 sh -c 'if [ "$RCC_RANK" = 1 ]; then exit 7; fi; sleep '"$MARK"
if expect_rc 7 "(b) exit 7" && expect_in err "rank 1" "(b) exit 7" &&
    expect_in err "status 7" "(b) exit 7" && expect_no_orphans "(b) exit 7"; then
    pass "(b) a rank exiting 7 stops the job with status 7 in ${elapsed_ms} ms"
fi

run 10 "$RUN" -n 3 sh -c 'if [ "$RCC_RANK" = 2 ]; then kill -SEGV $$; fi; sleep '"$MARK"
if expect_rc 139 "(b) SIGSEGV" && expect_in err "rank 2" "(b) SIGSEGV" &&
    expect_in err "signal 11" "(b) SIGSEGV" && expect_no_orphans "(b) SIGSEGV"; then
    pass "(b) a rank killed by SIGSEGV gives 139 in ${elapsed_ms} ms"
fi

# Ranks that ignore SIGTERM get SIGKILL after the 5 s grace period. Rank 0 fails only once the
# others have set their trap (else SIGTERM could beat it).
run 15 "$RUN" -n 3 sh -c 'trap "" TERM
    if [ "$RCC_RANK" != 0 ]; then touch "$1/trap.$RCC_RANK"; exec sleep '"$MARK"'; fi
    i=0
    while [ ! -e "$1/trap.1" ] || [ ! -e "$1/trap.2" ]; do
        i=$((i + 1)); [ $i -gt 200 ] && break; sleep 0.05
    done
    exit 3' sh "$TMP"
if expect_rc 3 "(b) SIGTERM ignored" && expect_in err "SIGKILL" "(b) SIGTERM ignored" &&
    expect_no_orphans "(b) SIGTERM ignored"; then
    if [[ $elapsed_ms -ge 4000 && $elapsed_ms -lt 10000 ]]; then
        pass "(b) ranks ignoring SIGTERM are killed after the grace period (${elapsed_ms} ms)"
    else
        fail "(b) SIGTERM ignored: took ${elapsed_ms} ms, expected about 5000"
    fi
fi

run 10 "$RUN" --timeout 1 -n 2 sleep "$MARK"
if expect_rc 124 "(b) --timeout" && expect_in err "timed out" "(b) --timeout" &&
    expect_no_orphans "(b) --timeout"; then
    pass "(b) --timeout 1 stops the job with 124 in ${elapsed_ms} ms"
fi

# --stacks: each rank still running at the timeout shows its backtraces (gdb), prefixed; with
# no gdb on PATH, the launcher says so and stops the job all the same.
run 40 "$RUN" --stacks --timeout 1 -n 2 sleep "$MARK"
if expect_rc 124 "(b) --stacks" && expect_in err "still running: 0, 1" "(b) --stacks" &&
    expect_no_orphans "(b) --stacks"; then
    if ! command -v gdb >/dev/null; then
        if expect_in err "gdb: command not found" "(b) --stacks without gdb"; then
            pass "(b) --stacks without gdb says so (gdb is not installed here)"
        fi
    elif [[ $(id -u) -ne 0 && $(cat /proc/sys/kernel/yama/ptrace_scope 2>/dev/null) != 0 ]]; then
        if expect_in err "rank 1 (pid" "(b) --stacks"; then
            pass "(b) --stacks ran gdb (not root and ptrace_scope is not 0: it may not attach)"
        fi
    elif expect_in err "rank 1 (pid" "(b) --stacks" && expect_in err "[1] #0 " "(b) --stacks" &&
        expect_in err "nanosleep" "(b) --stacks"; then
        pass "(b) --stacks shows each rank's backtrace in ${elapsed_ms} ms"
    fi
fi

# SIGTERM to the launcher reaches the ranks; the launcher then dies of SIGTERM (143).
echo "+ $RUN -n 3 sleep $MARK &; kill -TERM"
rc=0
"$RUN" -n 3 sleep "$MARK" >"$TMP/out" 2>"$TMP/err" </dev/null &
launcher=$!
for _ in 1 2 3 4 5 6 7 8 9 10; do
    [[ $(procs_with "sleep $MARK" | grep -c .) -ge 4 ]] && break # launcher + 3 ranks
    sleep 0.1
done
kill -TERM "$launcher" 2>/dev/null || true # an early exit is caught by expect_rc
for _ in $(seq 100); do # wait, but not forever: a broken launcher may ignore SIGTERM
    kill -0 "$launcher" 2>/dev/null || break
    sleep 0.1
done
if kill -0 "$launcher" 2>/dev/null; then
    fail "(b) SIGTERM to the launcher: still running 10 s later"
    kill -KILL "$launcher" 2>/dev/null || true
fi
wait "$launcher" || rc=$?
if expect_rc 143 "(b) SIGTERM to the launcher" && expect_no_orphans "(b) SIGTERM to the launcher"
then
    pass "(b) SIGTERM to the launcher is forwarded to the ranks"
fi

# Background processes a successful job leaves behind do not survive it.
run 10 "$RUN" -n 2 sh -c 'sleep '"$MARK"' & echo started'
if expect_rc 0 "(b) leftovers" && expect_no_orphans "(b) leftovers"; then
    pass "(b) leftover background processes of the ranks are killed"
fi

# ------------------------------------------------------------------------------------------
echo "== (c), (d) ringcc-perf under ringcc-run"

# perf_rows WANT WHAT: the table has WANT rows, none with wrong values, and the OK summary.
perf_rows() {
    local rows wrong
    rows=$(grep -cE '^\[0\] +[0-9]+ +[0-9]+ ' "$TMP/out" || true)
    wrong=$(grep -E '^\[0\] +[0-9]+ +[0-9]+ ' "$TMP/out" | awk '$9 != "0"' | wc -l) # [0] size ... #wrong
    if [[ $rows -ne $1 ]]; then
        fail "$2: $rows result rows, expected $1"
        return 1
    fi
    if [[ $wrong -ne 0 ]]; then
        fail "$2: $wrong rows with wrong values"
        return 1
    fi
    expect_in out "# Out of bounds values : 0 OK" "$2" && expect_in out "Avg bus bandwidth" "$2"
}

if [[ ! -x $PERF ]]; then
    fail "(c) (d): $PERF is not an executable"
else
    # Sizes 8, 32, ..., 1M: 9 rows.
    run 240 "$RUN" -n 4 "$PERF" -b 8 -e 1M -f 4 -n 3 -w 1
    if expect_rc 0 "(c) perf -n 4" && perf_rows 9 "(c) perf -n 4"; then
        pass "(c) ringcc-perf on 4 ranks: 9 rows, no wrong values (${elapsed_ms} ms)"
    fi

    # Sizes 1, 4, ..., 4K (7) x 10 types x 5 ops.
    run 240 "$RUN" -n 3 "$PERF" -b 1 -e 4K -f 4 -n 2 -w 1 -d all -o all
    if expect_rc 0 "(d) perf -d all -o all" && perf_rows 350 "(d) perf -d all -o all"; then
        pass "(d) ringcc-perf on 3 ranks, every type and op: 350 rows exact (${elapsed_ms} ms)"
    fi
fi

# ------------------------------------------------------------------------------------------
echo "== (e) RCC_SOCKET_CONGESTION"

if [[ -x $PERF ]]; then
    run 60 env RCC_DEBUG=INFO RCC_SOCKET_CONGESTION=reno "$RUN" -n 2 "$PERF" -b 1M -e 1M -n 2 -w 1
    # Both sides: an accepted connection runs what its listener was given
    # before it listened, not the system's default.
    if expect_rc 0 "(e) reno" && perf_rows 1 "(e) reno" &&
        expect_in err "data connections use congestion control reno (connected)" "(e) reno" &&
        expect_in err "data connections use congestion control reno (accepted)" "(e) reno"; then
        pass "(e) RCC_SOCKET_CONGESTION=reno: the data connections, both sides, use reno"
    fi
    run 60 env RCC_SOCKET_CONGESTION=no-such-cc "$RUN" -n 2 "$PERF" -b 1M -e 1M -n 2 -w 1
    if expect_rc 0 "(e) refused" && perf_rows 1 "(e) refused" &&
        expect_in err "RCC_SOCKET_CONGESTION=no-such-cc refused by the kernel" "(e) refused"; then
        pass "(e) an algorithm the kernel refuses: a warning, the default, correct results"
    fi
fi

# ------------------------------------------------------------------------------------------
echo "== (f) RCC_CHECKSUM"

if [[ -x $PERF ]]; then
    run 120 env RCC_CHECKSUM=1 "$RUN" -n 3 "$PERF" -b 1 -e 4M -f 16 -n 2 -w 1 -d float32,bf16 -o sum,max
    if expect_rc 0 "(f) checksums" && perf_rows 24 "(f) checksums"; then
        pass "(f) RCC_CHECKSUM=1: every message checked, 24 rows exact"
    fi
    run 60 env RCC_CHECKSUM=1 RCC_CHECKSUM_FAULT=7 "$RUN" -n 3 "$PERF" -b 1M -e 1M -n 5 -w 1
    if [[ $rc -ne 0 ]] && expect_in err "fails its checksum" "(f) damaged"; then
        pass "(f) a damaged payload fails the job, named (exit $rc)"
    elif [[ $rc -eq 0 ]]; then
        fail "(f) damaged payloads went unnoticed"
    fi
fi

# ------------------------------------------------------------------------------------------
echo "== (g) RCC_NSOCKS"

if [[ -x $PERF ]]; then
    # 4 ranks, 3 connections per ring edge, spread from 64 KiB (one below it): the ring's
    # collectives, sizes across the chunking and the threshold.
    for coll in allreduce reducescatter allgather broadcast; do
        run 180 env RCC_NSOCKS=3 RCC_NSOCKS_MIN_BYTES=64K RCC_DEBUG=INFO "$RUN" -n 4 "$PERF" \
            -C $coll -b 1 -e 8M -f 8 -n 2 -w 1
        if expect_rc 0 "(g) $coll" && perf_rows 8 "(g) $coll" &&
            expect_in err "3 connections per edge" "(g) $coll"; then
            pass "(g) RCC_NSOCKS=3: $coll exact over 3 connections per edge"
        fi
    done
    # Ranks that disagree on a setting both ends of an edge act on fail at set-up, naming
    # it: each rank's shell evaluates its own value ("ASSIGNMENT@TEXT OF THE ERROR").
    for setting in \
        'RCC_NSOCKS=$((RCC_RANK + 1))@RCC_NSOCKS is' \
        'RCC_NSOCKS_MIN_BYTES=$((RCC_RANK + 1))M@RCC_NSOCKS_MIN_BYTES is' \
        'RCC_DEVICE_CHUNK_BYTES=$((RCC_RANK + 1))M@RCC_DEVICE_CHUNK_BYTES is' \
        'RCC_CUDAIPC_WINDOW_BYTES=$((RCC_RANK + 1))M@RCC_CUDAIPC_WINDOW_BYTES is' \
        'RCC_CHUNK_BYTES=$((RCC_RANK + 1))M@the chunk size (RCC_CHUNK_BYTES' \
        'RCC_ALGO=$([ "$RCC_RANK" = 1 ] && echo ring || echo auto)@RCC_ALGO is' \
        'RCC_CHECKSUM=$((RCC_RANK % 2))@RCC_CHECKSUM is' \
        'RCC_SMALL_MAX_BYTES=$((RCC_RANK + 1))K@RCC_SMALL_MAX_BYTES is' \
        'RCC_MID_MAX_BYTES=$((RCC_RANK + 1))M@RCC_MID_MAX_BYTES is' \
        'RCC_FUSION_BYTES=$((RCC_RANK + 1))M@RCC_FUSION_BYTES is' \
        'RCC_RING_PASS_BYTES=$((RCC_RANK + 1))M@RCC_RING_PASS_BYTES is'; do
        assign=${setting%%@*} named=${setting#*@} name=${setting%%=*}
        run 60 "$RUN" -n 3 sh -c "$assign exec \"\$0\" -b 1M -e 1M" "$PERF"
        if [[ $rc -ne 0 ]] && expect_in err "$named" "(g) differing $name"; then
            pass "(g) differing $name fails the job at set-up, named (exit $rc)"
        elif [[ $rc -eq 0 ]]; then
            fail "(g) differing $name went unnoticed"
        fi
    done
fi

# ------------------------------------------------------------------------------------------
echo "== (h) ringcc-linkperf"

LINKPERF=$(dirname "$PERF")/ringcc-linkperf
if [[ -x $LINKPERF ]]; then
    # Every byte checked, one way and both ways, from buffers as they come and from buffers
    # registered with the transport first (-r: zero-copy sends where the transport has them).
    for opts in "-c 1" "-c 1 -B" "-c 1 -r" "-c 1 -r -B"; do
        # shellcheck disable=SC2086 # the options are words on purpose
        run 120 "$RUN" -n 2 "$LINKPERF" $opts -b 1 -e 4M -n 8 -w 1
        if expect_rc 0 "(h) linkperf $opts" &&
            [[ $(grep -cE '^\[0\] +[0-9]+ +[0-9]+ +8 ' "$TMP/out") -eq 12 ]]; then
            pass "(h) ringcc-linkperf $opts: 12 sizes, every byte right"
        else
            fail "(h) ringcc-linkperf $opts: expected 12 rows and exit 0"
        fi
    done
fi

# ------------------------------------------------------------------------------------------
if [[ ${#failed[@]} -ne 0 ]]; then
    echo "${#failed[@]} check(s) failed:" >&2
    printf '  %s\n' "${failed[@]}" >&2
    exit 1
fi
echo "all launcher and benchmark checks passed"
