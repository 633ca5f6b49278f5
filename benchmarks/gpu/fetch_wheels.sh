#!/usr/bin/env bash
# Download pytest, hypothesis and their dependencies as wheels for the GPU machine (Python 3.12, no network
# there), into build/gpu-wheels (ignored by git; pass it to the GPU run with `carry`).
#   bash benchmarks/gpu/fetch_wheels.sh [DEST]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
dest="${1:-build/gpu-wheels}"
mkdir -p "$dest"
"${PYTHON:-python3}" -m pip download --quiet --disable-pip-version-check \
  --only-binary=:all: --python-version 3.12 --implementation cp \
  --dest "$dest" "pytest>=8" "hypothesis>=6"
ls -la "$dest"
