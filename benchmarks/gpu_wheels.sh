#!/usr/bin/env bash
# The wheels a lent GPU's image lacks, made here, so the GPU session spends no device time on set-up.
#
#     bash benchmarks/gpu_wheels.sh            # -> .whl/ (git-ignored), about 1 MB, in seconds
#
# The image (docs/gpu.md) runs its own python3 (3.12, torch and CUDA, timm, pandas, scipy, seaborn, psutil,
# nvidia-ml-py, pyyaml, tabulate, portalocker present) and reaches no package registry. What benchlib's
# session and `benchlib run` import beyond it is fvcore and its pure-Python needs (iopath, yacs, termcolor;
# benchlib itself travels as the working tree, on PYTHONPATH); papermill, nbconvert, nbformat, IPython and optuna are not needed for a single
# configuration (tests/test_gpu_session.py runs `benchlib run` with them blocked). All are pure Python:
# one wheel each serves the image's Python whatever this machine's is. gpu_session.py installs every
# wheel under .whl/ into a temporary folder before its first section (`--no-index --no-deps`).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-.whl}
PY=${PYTHON:-.venv/bin/python}
mkdir -p "$OUT"
rm -f "$OUT"/fvcore-*.whl "$OUT"/iopath-*.whl "$OUT"/yacs-*.whl "$OUT"/termcolor-*.whl
# the versions this checkout's own environment runs (fvcore and iopath ship sources only: built here)
"$PY" -m pip wheel -q --no-deps -w "$OUT" fvcore==0.1.5.post20221221 iopath==0.1.10 yacs==0.1.8 termcolor==3.3.0
ls -1 "$OUT"/*.whl
du -sh "$OUT"
