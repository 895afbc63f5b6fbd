#!/usr/bin/env bash
# tests/gpu/device-run.sh [OUTDIR]
#
# tests/gpu/run-device.sh for the project's device tool, which returns at most 8 files from
# $OUT: runs it into a scratch folder under an overall limit (RCC_DEVICE_BUDGET + 60 s), then
# leaves in OUTDIR (default $OUT) summary.txt and logs.tgz (every log; tar xzf logs.tgz).
# The tool's copy of the working tree has no git: pass the commit for the summary, e.g.
#   RCC_COMMIT=$(git rev-parse --short HEAD) -> run command "RCC_COMMIT=abc1234 tests/gpu/device-run.sh"
# Exit status: run-device.sh's (124 when the overall limit stopped it).
set -u
out=${1:-${OUT:-}}
if [ -z "$out" ] || [ "$out" = "-h" ] || [ "$out" = "--help" ]; then
    sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
fi
here=$(cd "$(dirname "$0")" && pwd) || exit 2
mkdir -p "$out" || exit 2
logs=$(mktemp -d "${TMPDIR:-/tmp}/ringcc-gpu.XXXXXX") || exit 2
budget=${RCC_DEVICE_BUDGET:-450}
RCC_DEVICE_BUDGET=$budget timeout --kill-after=10 "$((budget + 60))" \
    "$here/run-device.sh" "$logs/logs"
rc=$?
[ "$rc" -ne 124 ] || echo "device-run: run-device.sh stopped at the overall limit" \
    | tee -a "$logs/logs/summary.txt"
cp "$logs/logs/summary.txt" "$out/summary.txt" 2>/dev/null
tar czf "$out/logs.tgz" -C "$logs" logs
rm -rf "$logs"
exit "$rc"
