#!/usr/bin/env bash
# check_exports.sh SHIM_SO NCCL_API_H [REAL_LIBNCCL_SO]
#
# The shim must define every NCCL function (a preloaded shim that left one undefined would let
# the real libnccl receive the shim's communicators): `nm -D` of SHIM_SO must list ncclX and
# pncclX for every SHIM_DECL in NCCL_API_H and, when REAL_LIBNCCL_SO is given, every function
# that library exports. Prints what is missing; exit status 1 when anything is.
set -u
if [ $# -lt 2 ]; then
    sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
fi
shim=$1 api=$2 real=${3:-}
command -v nm >/dev/null || { echo "SKIP: no nm"; exit 77; }

exported() { nm -D --defined-only "$1" | awk '$2 == "T" || $2 == "W" { print $3 }' | sort -u; }
have=$(exported "$shim") || exit 1
want=$(sed -n 's/^SHIM_DECL([^,]*, *\(nccl[A-Za-z0-9_]*\),.*/\1/p' "$api" | sort -u)
[ -n "$want" ] || { echo "no SHIM_DECL found in $api"; exit 1; }
missing=$(comm -23 <({ echo "$want"; echo "$want" | sed 's/^/p/'; } | sort -u) <(echo "$have"))
status=0
if [ -n "$missing" ]; then
    echo "missing from $shim (declared in $api):"; echo "$missing" | sed 's/^/  /'
    status=1
fi
echo "$(echo "$want" | wc -l) functions declared, each exported as ncclX and pncclX"
if [ -n "$real" ]; then
    missing=$(comm -23 <(exported "$real" | grep -i nccl) <(echo "$have"))
    if [ -n "$missing" ]; then
        echo "exported by $real but not by the shim:"; echo "$missing" | sed 's/^/  /'
        status=1
    else
        echo "all $(exported "$real" | grep -ci nccl) NCCL functions that $real exports are defined"
    fi
else
    echo "(no real libnccl.so.2 found to compare with)"
fi
exit $status
