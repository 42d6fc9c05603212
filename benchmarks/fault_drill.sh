#!/usr/bin/env bash
# Fault drill (issue 8): run a study once uninterrupted, then run it again killing it (SIGKILL of the whole
# process group: the study and its notebook kernel) at random points several times, resume until it
# completes, and compare the final rows with the uninterrupted run: same configurations, none missing,
# none doubled, every one complete.
#
#   benchmarks/fault_drill.sh [PARAMS.yaml]        (default: params/default.yaml; KILLS=3 SEED=1 to change)
set -euo pipefail
cd "$(dirname "$0")/.."
PARAMS=${1:-params/default.yaml}
KILLS=${KILLS:-3}
RANDOM=${SEED:-1}
BL=.venv/bin/benchlib
PY=.venv/bin/python
WORK=$(mktemp -d /tmp/benchlib-drill.XXXXXX)
STUDY=$($PY -c "from benchlib.spec.study import study_from_file; print(study_from_file('$PARAMS').study)")
echo "[drill] study '$STUDY' from $PARAMS, $KILLS kills, work folder $WORK"

t0=$(date +%s)
$BL study "$PARAMS" --results-root "$WORK/ref/results" --reports-root "$WORK/ref/reports" >"$WORK/ref.log" 2>&1
ref_s=$(( $(date +%s) - t0 ))
echo "[drill] uninterrupted run: ${ref_s} s"

rows() { ls "$WORK/drill/results/$STUDY/rows" 2>/dev/null | wc -l; }
for i in $(seq 1 "$KILLS"); do
  span=$(( ref_s / (i + 1) ))  # each resumed run has less left to do: kill it sooner
  delay=$(( 3 + RANDOM % (span > 3 ? span : 3) ))
  setsid $BL study "$PARAMS" --results-root "$WORK/drill/results" --reports-root "$WORK/drill/reports" \
    >>"$WORK/drill.log" 2>&1 &
  pid=$!
  sleep "$delay"
  if kill -0 "$pid" 2>/dev/null; then
    kill -KILL -- "-$pid" 2>/dev/null || true
    echo "[drill] kill $i/$KILLS after ${delay} s: $(rows) row file(s) on disk"
  else
    echo "[drill] kill $i/$KILLS after ${delay} s: the run had already finished"
  fi
  wait "$pid" 2>/dev/null || true
done
$BL study "$PARAMS" --results-root "$WORK/drill/results" --reports-root "$WORK/drill/reports" >>"$WORK/drill.log" 2>&1
echo "[drill] resumed to completion"

$PY - "$WORK/ref/results/$STUDY" "$WORK/drill/results/$STUDY" <<'PYEOF'
import json, sys
from collections import Counter
from pathlib import Path
from benchlib.store.rows import read_results

ref, drill = (Path(p) for p in sys.argv[1:3])
ref_ids = set(read_results([ref])["run_id"])
raw = [json.loads(p.read_text())["run_id"] for p in sorted((drill / "rows").glob("*.json"))]
counts = Counter(raw)
df = read_results([drill])
missing, extra = ref_ids - set(counts), set(counts) - ref_ids
doubled = [k for k, n in counts.items() if n > 1]
incomplete = df[df["status"] != "ok"][["run_id", "status", "error"]].to_dict("records")
result = {"configurations_reference": len(ref_ids), "configurations_drill": len(counts), "missing": sorted(missing),
          "extra": sorted(extra), "doubled": doubled, "not_ok": incomplete,
          "leftover_tmp_files": len(list(drill.rglob("*.tmp")))}
result["pass"] = not (missing or extra or doubled or incomplete)
print(json.dumps(result))
sys.exit(0 if result["pass"] else 1)
PYEOF
