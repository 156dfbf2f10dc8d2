#!/usr/bin/env bash
# Download flash-attn-4 and its dependencies for the GPU machine (Python 3.12, manylinux
# x86_64, CUDA 13 torch) and pack them into wheels/fa4-site.tar.xz, small enough to travel
# with the working tree (the GPU machine has no network).
#
#   bash gpu/fetch_wheels.sh            # run here, with network to the package index
#   -> wheels/fa4-site.tar.xz           # `site/`: every wheel unzipped into one folder
#
# Only the archive lands in wheels/ (ignored by git: never commit it); carry just that file
# to the GPU machine (the device tool's carry: ["wheels/fa4-site.tar.xz"], 55 of 64 MiB).
# device_check.sh unpacks it and sets PYTHONPATH=SITE:SITE/nvidia_cutlass_dsl/dsl_packages
# (PYTHONPATH runs no .pth file). xz with a 256 MiB dictionary takes minutes and ~3 GB.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
WHEELS="$REPO/wheels"
PIP=${PIP:-pip}
# The pinned list (gpu/fa4-requirements.txt, shared with tox -e fa4-compile), comments out.
mapfile -t PACKAGES < <(grep -v '^\s*\(#\|$\)' "$REPO/gpu/fa4-requirements.txt")

STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
mkdir -p "$WHEELS" "$STAGE/dl" "$STAGE/site"
"$PIP" download --no-deps --only-binary=:all: --dest "$STAGE/dl" \
  --python-version 3.12 --implementation cp --abi cp312 \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any \
  "${PACKAGES[@]}"

for name in "${PACKAGES[@]}"; do
  stem=${name%%==*}
  wheel=$(ls "$STAGE/dl/${stem//-/_}"-"${name##*==}"-*.whl | head -n 1)
  python3 -m zipfile -e "$wheel" "$STAGE/site"
done
test -f "$STAGE/site/flash_attn/cute/interface.py"
test -d "$STAGE/site/nvidia_cutlass_dsl/dsl_packages/cutlass"

tar -C "$STAGE" -cf - site | xz --x86 --lzma2=preset=9e,dict=256MiB -T1 >"$WHEELS/fa4-site.tar.xz.part"
mv "$WHEELS/fa4-site.tar.xz.part" "$WHEELS/fa4-site.tar.xz"
ls -l "$WHEELS/fa4-site.tar.xz"
echo "packed $(du -sh "$STAGE/site" | cut -f1) of wheels into wheels/fa4-site.tar.xz"
