#!/usr/bin/env bash
# Build the conformance reference environments: SGLang 0.5.23's scheduler code on a
# CPU-only torch, in its own venv (.venv-sglang, git-ignored), apart from the
# project venv, which never needs SGLang; then one small venv per other release
# listed in tests/conformance/sglang-releases.txt (.venv-sglang-<release>), which
# reuses .venv-sglang's packages and holds only that release's SGLang.
#
# Releases: all listed ones by default; SGLANG_RELEASES="0.5.9 0.5.16" for some,
# SGLANG_RELEASES=none for 0.5.23 only.
#
# Idempotent: re-running reuses the venv and pip skips what is already there.
# From scratch: rm -rf .venv-sglang && bash scripts/conformance_env.sh
#
# Only the scheduler-side modules are used (managers/schedule_policy.py,
# managers/schedule_batch.py, mem_cache/*). SGLang goes in with --no-deps (its
# declared dependencies are a CUDA stack); the packages its import chain needs
# are pinned in tests/conformance/requirements-sglang.txt, also --no-deps. What
# cannot be installed here (torchvision, tvm_ffi) is stubbed by
# tests/conformance/_stubs.py, which says why for each.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${SGLANG_VENV:-$ROOT/.venv-sglang}"
PY="${PYTHON311:-python3.11}"
start=$(date +%s)

if [ ! -x "$VENV/bin/python" ]; then
    "$PY" -m venv "$VENV"
fi
pip_install() {
    "$VENV/bin/python" -m pip install --disable-pip-version-check -q "$@" 2>&1 \
        | { grep -v "is ignored: it is neither a file nor a directory" || true; }
}

# CPU torch, always pinned: an unpinned torch resolves to a multi-GB CUDA build.
pip_install torch==2.13.0
# SGLang without its GPU dependency tree, then its import-time needs, pinned.
pip_install --no-deps sglang==0.5.23
pip_install --no-deps -r "$ROOT/tests/conformance/requirements-sglang.txt"

# Guard: nothing above may have replaced the CPU torch.
"$VENV/bin/python" -c 'import torch, sys; v = torch.__version__; print("torch", v); sys.exit(0 if v.startswith("2.13.0") else 1)'
"$VENV/bin/python" -W ignore "$ROOT/tests/conformance/sglang_ref.py" --self-check
echo "conformance env ready at $VENV ($(( $(date +%s) - start )) s)"

# One venv per other release. The .pth file appends .venv-sglang's site-packages to
# sys.path after the release venv's own, so the release's SGLang (and its pins) win.
BASE_SITE="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
LIST="$ROOT/tests/conformance/sglang-releases.txt"
WANT="${SGLANG_RELEASES:-$(grep -v '^#' "$LIST" | awk 'NF {print $1}')}"
[ "$WANT" = none ] && WANT=""
# one release's venv: its own SGLang over the base venv's packages, then a self-check
build_release() {
    local release="$1" t0 extras RV site
    t0=$(date +%s)
    extras="$(awk -v r="$release" '$1 == r {$1 = ""; print}' "$LIST")"
    RV="$ROOT/.venv-sglang-$release"
    [ -x "$RV/bin/python" ] || "$PY" -m venv "$RV"
    site="$("$RV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    echo "$BASE_SITE" > "$site/_sglang_reference_base.pth"
    # shellcheck disable=SC2086  # the extras are words
    "$RV/bin/python" -m pip install --disable-pip-version-check -q --no-deps \
        "sglang==$release" $extras 2>&1 | { grep -v "is ignored: it is neither" || true; }
    "$RV/bin/python" -W ignore "$ROOT/tests/conformance/sglang_ref.py" --self-check
    echo "  .venv-sglang-$release ready ($(( $(date +%s) - t0 )) s)"
}
# the release venvs are independent: built four at a time (each is mostly waiting on pip),
# each one's output printed whole when it is done
LOGS="$(mktemp -d)"
trap 'rm -rf "$LOGS"' EXIT
failed=0
set -- $WANT
while [ $# -gt 0 ]; do
    batch=()
    for release in "$@"; do
        [ ${#batch[@]} -lt 4 ] || break
        build_release "$release" > "$LOGS/$release.log" 2>&1 &
        batch+=("$release:$!")
        shift
    done
    for item in "${batch[@]}"; do
        release="${item%%:*}"
        if ! wait "${item##*:}"; then
            failed=1
            echo "  .venv-sglang-$release FAILED:"
        fi
        cat "$LOGS/$release.log"
    done
done
[ "$failed" = 0 ] || { echo "reference envs failed" >&2; exit 1; }
echo "all reference envs ready ($(( $(date +%s) - start )) s)"
