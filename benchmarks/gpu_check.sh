#!/usr/bin/env bash
# The prepared GPU check (issue 36): run where a CUDA device is present, from the repository root, with the
# project installed (make install, or a CUDA build of torch==2.13.0 in place of the CPU wheel).
#   benchmarks/gpu_check.sh [OUT_DIR]        (default: $OUT, else outputs/gpu_check)
# Writes: env.json (device, torch, CUDA), sta_bench.json (the STA attention kernel against dense SDPA and
# FlexAttention), dry_run.json (every method's paper-scale dry run on the device: shapes, memory, two steps).
set -euo pipefail
out="${1:-${OUT:-outputs/gpu_check}}"
mkdir -p "$out"
py=.venv/bin/python
[ -x "$py" ] || py=python3
export PAPERLINE_ACCELERATOR=gpu PAPERLINE_DEVICES=1 PAPERLINE_PROGRESS=0
"$py" - "$out/env.json" <<'PY'
import json, sys, torch
info = {"torch": torch.__version__, "cuda": torch.version.cuda, "available": torch.cuda.is_available()}
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    info.update(device=p.name, memory_gib=round(p.total_memory / 2**30, 1), capability=f"{p.major}.{p.minor}")
json.dump(info, open(sys.argv[1], "w"), indent=1)
print(info)
if not info["available"]:
    sys.exit("no CUDA device: this check is for a GPU machine")
PY
timeout 600 "$py" benchmarks/sta_attention.py --quick --json "$out/sta_bench.json" || echo "sta benchmark failed (rc $?)"
timeout 1800 "$py" -m flows.cli dry-run --all --json "$out/dry_run.json" || echo "some dry runs failed (see $out/dry_run.json)"
echo "results in $out"
