#!/usr/bin/env bash
# ringcc-info prints every parameter of the one parameter table (lib/params.h)
# with its default and the value in effect, in each of its modes, and the
# sections of the host report.
# Usage: test_info.sh RINGCC_INFO SOURCE_ROOT
set -euo pipefail
info=${1:?usage: $0 RINGCC_INFO SOURCE_ROOT}
root=${2:?usage: $0 RINGCC_INFO SOURCE_ROOT}
status=0
fail() { echo "FAIL: $*" >&2; status=1; }

params=$(grep -oE '^ *X\([A-Z_]+, (INT|STR), "[^"]*"' "$root/lib/params.h")
[[ -n $params ]] || { echo "no parameters found in lib/params.h" >&2; exit 1; }
full=$("$info")
only=$("$info" --params)
md=$("$info" --markdown)
n=0
while read -r line; do
    name=RCC_$(sed -E 's/^ *X\(([A-Z_]+),.*/\1/' <<<"$line")
    default=$(sed -E 's/.*"([^"]*)"$/\1/' <<<"$line")
    shown=${default:-(empty)}
    grep -qF "  $name = $shown   [default: $shown]" <<<"$full" || fail "full report: no line for $name with default $shown"
    grep -qF "  $name = $shown   [default: $shown]" <<<"$only" || fail "--params: no line for $name with default $shown"
    if [[ -n $default ]]; then
        grep -qF "| \`$name\` | \`$default\` |" <<<"$md" || fail "--markdown: no row for $name with default $default"
    else
        grep -qF "| \`$name\` | (empty) |" <<<"$md" || fail "--markdown: no row for $name"
    fi
    n=$((n + 1))
done <<<"$params"
[[ $(grep -c '^  RCC_' <<<"$only") == "$n" ]] || fail "--params lists $(grep -c '^  RCC_' <<<"$only") parameters, the table has $n"
echo "ok: $n parameters, each with its default, in all three modes"

# The value in effect, and a value the library would refuse.
# (Whole outputs into grep: grep -q stops reading at its match, and with pipefail the
# writer's SIGPIPE would fail the line.)
current=$(RCC_SLOTS=7 "$info" --params)
grep -qF "  RCC_SLOTS = 7 (set)   [default: 4]" <<<"$current" || fail "RCC_SLOTS=7 not shown as the current value"
current=$(RCC_SLOTS=999 "$info" --params)
grep -qF "RCC_SLOTS = 999 (set; INVALID" <<<"$current" || fail "RCC_SLOTS=999 not marked invalid"
echo "ok: current values"

for section in "Features built:" "  cuda " "  ibverbs " "Transports (" "  tcp      " "  cudaipc  " \
    "Network interfaces:" "  lo " "GPUs:" "RDMA devices:" "Parameters ("; do
    grep -qF -- "$section" <<<"$full" || fail "full report has no '$section'"
done
grep -qE '^ringcc [0-9]+\.[0-9]+\.[0-9]+ \(library ' <<<"$full" || fail "no version line"
# A transport that is not usable says why.
if grep -E '^  [a-z]+ +not usable' <<<"$full" | grep -qvE 'not usable: .{10,}'; then
    fail "a transport is not usable without a reason"
fi
echo "ok: sections"
"$info" --bogus >/dev/null 2>&1 && fail "--bogus accepted"

# docs/env.md carries the generated table as the program prints it.
generated=$(sed -n '/^<!-- generated: ringcc-info --markdown -->$/,/^<!-- end of generated part -->$/p' "$root/docs/env.md" | sed '1d;$d')
if [[ $generated != "$md" ]]; then
    fail "docs/env.md's table differs from ringcc-info --markdown (regenerate it; see the page)"
    diff <(echo "$generated") <(echo "$md") >&2 || true
else
    echo "ok: docs/env.md is current"
fi
exit $status
