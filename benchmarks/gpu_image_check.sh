#!/usr/bin/env bash
# Does the GPU session start on the lent GPU's image plus the carried wheels, and nothing else? Checked here,
# with no GPU, in a clean virtual environment that holds only the image's packages benchlib could touch
# (docs/gpu.md lists the image; its notebook machinery is absent there) and .whl/ from gpu_wheels.sh, then the
# session's CPU path end to end (every section, CUDA's parts skipped with the reason).
#
#     bash benchmarks/gpu_wheels.sh && bash benchmarks/gpu_image_check.sh [VENV]     # a few minutes
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${1:-/tmp/benchlib-gpu-image}
# on the image (its pip list, 2026-11): what benchlib imports of it; not papermill, nbconvert, nbformat,
# IPython, ipykernel, optuna or fvcore
IMAGE="torch torchvision timm numpy pandas scipy matplotlib seaborn psutil nvidia-ml-py pyyaml tabulate
portalocker pillow scikit-learn tqdm jinja2 packaging pyarrow filelock typing-extensions"
rm -rf "$VENV"
python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade "pip>=23"
# shellcheck disable=SC2086
"$VENV/bin/python" -m pip install -q -c requirements/constraints.txt $IMAGE
"$VENV/bin/python" -m pip install -q --no-index --no-deps .whl/*.whl
for absent in papermill nbconvert nbformat IPython ipykernel optuna; do
  if "$VENV/bin/python" -c "import $absent" 2>/dev/null; then
    echo "gpu_image_check: $absent is importable: the environment is not the image's" >&2
    exit 1
  fi
done
OUT=$(mktemp -d)
PYTHONPATH=. "$VENV/bin/python" benchmarks/gpu_session.py --allow-cpu --quick --device cpu --out "$OUT"
PYTHONPATH=. "$VENV/bin/python" -m benchlib run --model resnet18 --data synthetic --batch-size 4 --image-size 32 \
  --steps 2 --set warmup_steps=1 --set latency_repeats=3 --set latency_budget_s=0 --no-save --json >/dev/null
echo "gpu_image_check: the session ran on the image's packages and .whl/ alone ($OUT/findings.jsonl)"
