#!/usr/bin/env bash
# One GPU session's checks, in one call: the acceptance run, the gpu-marked tests, and single configurations
# of resnet50 in each GPU variant through the CLI. Everything lands in $OUT (the rows as one tarball).
# Run from the repository root on a machine whose python3 holds torch. Wheels in .whl/ (fvcore and its pure-Python
# needs, where the image lacks them) are installed to /tmp/site first; timm's benchmark.py in .timm/ (from a
# pytorch-image-models checkout) runs beside benchlib in the acceptance run.
#   OUT=/tmp/out bash benchmarks/gpu_session.sh            (DEVICE=cpu QUICK=1 runs the plumbing on a CPU)
set -u -o pipefail
OUT=${OUT:-/tmp/gpu_session}; mkdir -p "$OUT"
DEVICE=${DEVICE:-cuda}; QUICK=${QUICK:-}
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
PY=${PY:-python3}
log() { echo "[gpu_session $(date +%T)] $*"; }
# wheels carried in .whl/ (e.g. fvcore and its pure-Python needs, which such an image may lack)
if compgen -G ".whl/*.whl" > /dev/null; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=$PYTHONPATH:/tmp/site && log "installed $(ls .whl | tr '\n' ' ')"
fi

log "machine"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,power.limit --format=csv 2>&1 | tee "$OUT/machine.txt"
$PY -c "import torch,sys;print(sys.version.split()[0],torch.__version__,torch.version.cuda,torch.cuda.is_available() and torch.cuda.get_device_name())" 2>&1 | tee -a "$OUT/machine.txt"

log "resnet50 per variant through the CLI"
rows=$(mktemp -d)
if [ -n "$QUICK" ]; then model=squeezenet1_1; batch=8; steps=3; px=32; else model=resnet50; batch=128; steps=30; px=224; fi
for variant in gpu-default gpu-amp gpu-bf16 gpu-channels-last; do
  timeout "${RUN_S:-60}" $PY -m benchlib run --model "$model" --data synthetic --device "$DEVICE" --batch-size "$batch" \
    --image-size "$px" --steps "$steps" --variant "$variant" --study gpu_session --results-dir "$rows" --json > "$rows/run_$variant.json" 2> "$OUT/run.log.tmp"
  rc=$?; tail -n 5 "$OUT/run.log.tmp"; cat "$OUT/run.log.tmp" >> "$rows/run.log"; log "$variant rc=$rc"
done
rm -f "$OUT/run.log.tmp"
tar -czf "$OUT/rows.tgz" -C "$rows" .

log "acceptance"
if [ "$DEVICE" = cpu ]; then acc_args=(--allow-cpu --quick); else acc_args=(); fi
# timm's benchmark.py (a checkout's, carried in .timm/) runs beside benchlib where timm is installed
if [ -f .timm/benchmark.py ]; then acc_args+=(--timm-benchmark .timm/benchmark.py); fi
timeout "${ACCEPT_S:-270}" $PY benchmarks/gpu_acceptance.py "${acc_args[@]}" --out "$OUT/acceptance.json" 2>&1 | tee "$OUT/acceptance.log"
log "acceptance rc=$?"

log "gpu-marked tests"
timeout "${TESTS_S:-110}" $PY -m pytest -p no:cacheprovider -q -m gpu --continue-on-collection-errors -rs \
  tests/test_variants.py tests/test_telemetry.py tests/test_roofline.py tests/test_timing.py \
  tests/test_layer_roofline.py tests/test_profiling.py tests/test_accelerator_paths.py 2>&1 | tee "$OUT/pytest_gpu.log"
log "tests rc=$?"

log "done"
