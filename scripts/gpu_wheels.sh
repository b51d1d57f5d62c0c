#!/usr/bin/env bash
# Fetch, on a machine with a package index, the wheels that scripts/gpu_check.sh installs on
# a GPU machine that has none (CUDA torch, lightning, torchmetrics and einops preinstalled,
# Hydra missing):
#
#   scripts/gpu_wheels.sh [WHEEL_DIR]      # default: .whl in the repository root
#
# gpu_check.sh installs every wheel found in $WHEELS (default .whl) with
# `pip install --no-index --no-deps --target` and puts src/ on PYTHONPATH, so neither the
# package index nor a build of this package is needed there. Environment knobs:
#   PYTHON_VERSION=3.12   the GPU machine's Python (wheels are pure Python but pip checks it)
#   PACKAGES="..."        what to fetch (default: Hydra 1.3 and OmegaConf 2.3, as tested, and ANTLR)
set -euo pipefail

REPO="$(cd "$(dirname "$0")/.." && pwd)"
DEST="${1:-$REPO/.whl}"
PYTHON_VERSION="${PYTHON_VERSION:-3.12}"
PACKAGES="${PACKAGES:-hydra-core>=1.3,<1.4 omegaconf>=2.3,<2.4 antlr4-python3-runtime==4.9.3}"
mkdir -p "$DEST"

for spec in $PACKAGES; do
    if ! python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version "$PYTHON_VERSION" \
        --implementation py --abi none --platform any -d "$DEST" "$spec" 2> /dev/null; then
        # antlr4-python3-runtime 4.9.3 is published as a source archive only: build its
        # (pure-Python) wheel here.
        python3 -m pip wheel --quiet --no-deps -w "$DEST" "$spec"
    fi
done
ls -l "$DEST"
