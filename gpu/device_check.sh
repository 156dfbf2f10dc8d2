#!/usr/bin/env bash
# The GPU device check: runs unchanged on an H200 (torch 2.11, Python 3.12, no network)
# from a copy of the repo, within 5 minutes.
#
#   bash gpu/device_check.sh [OUT]      # OUT defaults to $OUT, else out/device_check
#   DEVICE=cpu DTYPE=fp32 PYTHON=... bash gpu/device_check.sh   # a dry run without a GPU
#
# 1. makes `schedcheck.*` importable without installing (a namespace folder of symlinks);
# 2. unpacks wheels/fa4-site.tar.xz (made by gpu/fetch_wheels.sh; carried with the tree
#    as an ignored path) into a temporary folder and puts it on PYTHONPATH;
# 3. runs the GPU tests (if pytest is there), then the nightly job on the small corpus
#    (hand-built scenarios, tests/regressions bundles and the real-trace windows of
#    traces/corpus/windows) on every backend, bf16 on cuda;
#    the nightly's table is printed last and its exit code is this script's.
set -uo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
OUT_DIR=${1:-${OUT:-$REPO/out/device_check}}
PY=${PYTHON:-python3}
DEVICE=${DEVICE:-cuda}
DTYPE=${DTYPE:-bf16}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
mkdir -p "$OUT_DIR" "$TMP/ns/schedcheck"

for pkg in sim engines invariants gpu traces; do
  ln -s "$REPO/$pkg" "$TMP/ns/schedcheck/$pkg"
done
export PYTHONPATH="$TMP/ns${PYTHONPATH:+:$PYTHONPATH}"

if [ -f "$REPO/wheels/fa4-site.tar.xz" ]; then
  start=$(date +%s)
  tar -C "$TMP" -xJf "$REPO/wheels/fa4-site.tar.xz"
  SITE="$TMP/site"
  export PYTHONPATH="$SITE:$SITE/nvidia_cutlass_dsl/dsl_packages:$PYTHONPATH"
  echo "flash-attn-4 site unpacked in $(( $(date +%s) - start )) s"
else
  echo "no wheels/fa4-site.tar.xz: flash-attn-4 will be refused (run gpu/fetch_wheels.sh)"
fi

"$PY" - <<'PY'
import sys, torch
print(f"python {sys.version.split()[0]}, torch {torch.__version__}, "
      f"cuda {torch.version.cuda}, available {torch.cuda.is_available()}")
if torch.cuda.is_available():
    print(f"device {torch.cuda.get_device_name(0)}, capability {torch.cuda.get_device_capability(0)}")
try:
    import flash_attn.cute as fa4
    print("flash_attn.cute:", fa4.__file__)
except Exception as exc:
    print(f"flash_attn.cute not importable: {type(exc).__name__}: {exc}")
PY

if "$PY" -c "import pytest" 2>/dev/null; then
  # --noconftest: the tests marked gpu need no fixture, and tests/conftest.py needs hypothesis
  timeout 90 "$PY" -m pytest -q -p no:cacheprovider --noconftest -m gpu "$REPO/tests/gpu" \
    >"$OUT_DIR/gpu_tests.txt" 2>&1
  echo "gpu tests: exit $? ($(tail -n 1 "$OUT_DIR/gpu_tests.txt"))"
else
  echo "gpu tests: pytest not installed, skipped"
fi

cd "$REPO"
# --budget-s: past 170 s no replay starts (the rest are reported skipped), so the reports and
# the table still come out before the hard timeout
timeout 210 "$PY" -m schedcheck.gpu.nightly "$REPO/traces/corpus/windows" --out "$OUT_DIR" \
  --device "$DEVICE" --dtype "$DTYPE" --block-size 16 --budget-s 170 \
  2>"$OUT_DIR/nightly_stderr.txt"
code=$?
[ $code -eq 124 ] && echo "nightly: timed out after 210 s"
exit $code
