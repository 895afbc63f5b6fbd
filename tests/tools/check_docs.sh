#!/usr/bin/env bash
# Keeps the README's environment-variable table true to the one parameter
# table (lib/params.h): every parameter is listed, with its default.
# Usage: check_docs.sh SOURCE_ROOT
set -euo pipefail
root=${1:?usage: $0 SOURCE_ROOT}
status=0
params=$(grep -oE '^ *X\([A-Z_]+, (INT|STR), "[^"]*"' "$root/lib/params.h")
[[ -n $params ]] || { echo "no parameters found in lib/params.h" >&2; exit 1; }
while read -r line; do
    name=RCC_$(sed -E 's/^ *X\(([A-Z_]+),.*/\1/' <<<"$line")
    default=$(sed -E 's/.*"([^"]*)"$/\1/' <<<"$line")
    row=$(grep -E "^\| \`$name\` \|" "$root/README.md" || true)
    if [[ -z $row ]]; then
        echo "README.md: no row for $name" >&2
        status=1
    elif [[ -n $default && $row != *"\`$default\`"* ]]; then
        echo "README.md: $name's row does not show the default \`$default\`: $row" >&2
        status=1
    else
        echo "ok: $name"
    fi
done <<<"$params"
# shellcheck disable=SC2016 # backquotes are Markdown here
documented=$(grep -oE '^\| `RCC_[A-Z_]+`' "$root/README.md" | tr -d '|` ')
for name in $documented; do
    grep -qE "X\(${name#RCC_}," "$root/lib/params.h" || { echo "README.md lists $name, which lib/params.h does not have" >&2; status=1; }
done
exit $status
