#!/usr/bin/env bash
# The wide GEMV's check (docs/wide-gemv.md has its first results), on a lent H100/H200 from the
# repository root with build/bin unpacked (scripts/pack_bin.sh): its tests and the decoder tests it
# touches, decode_loop on the Llama-3.2-1B preset at b16/32/64 with the wide GEMV on every bucket to 64
# (--wide_gemv_max_bucket 64) beside cuBLASLt in the same call, and parity with transformers at b32 with
# it on. Logs and JSON go to OUT_DIR; the last lines are the tests' verdicts and both decode_loop tables.
# About 3 minutes on an H100 (2026-11-27).
#
#   scripts/peers/wide_gemv_check.sh OUT_DIR
set -uo pipefail
out=${1:?OUT_DIR}
mkdir -p "$out"
for dir in /usr/local/cuda/lib64; do [ -d "$dir" ] && export LD_LIBRARY_PATH="$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; done
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv >"$out/gpu.txt"
verdicts=()
for t in decode_wide_gemv_gpu_test decoder_model_gpu_test decoder_dp_gpu_test decoder_prefill_gpu_test; do
  timeout 300 "build/bin/$t" --gtest_output="json:$out/$t.json" >"$out/$t.log" 2>&1
  verdicts+=("$t exit $? $(grep -E '^\[  (PASSED|FAILED) ' "$out/$t.log" | tr '\n' ' ')")
done
ck=/tmp/wide-gemv-checkpoint/llama-3.2-1b
[ -f "$ck/config.json" ] || python3 scripts/checkpoints/make_checkpoint.py --preset llama-3.2-1b --out "$ck" \
  --device cuda >"$out/checkpoint.log" 2>&1
common=(--checkpoint "$ck" --prompt_tokens 16 --new_tokens 128 --engines host,tail,conditional --repeats 3)
timeout 240 build/bin/decode_loop "${common[@]}" --batches 16,32,64 --gemm auto --wide_gemv_max_bucket 64 \
  --json "$out/decode-loop-wide.json" >"$out/decode-loop-wide.log" 2>&1
verdicts+=("decode_loop wide exit $?")
timeout 180 build/bin/decode_loop "${common[@]}" --batches 16,32,64 --gemm cublaslt \
  --json "$out/decode-loop-cublaslt.json" >"$out/decode-loop-cublaslt.log" 2>&1
verdicts+=("decode_loop cublaslt exit $?")
timeout 240 python3 scripts/checkpoints/parity.py --presets tiny-llama3,tiny-qwen2,llama-3.2-1b --batches 32 \
  --work /tmp/wide-gemv-check --engines host,tail,conditional --baton-flag wide_gemv_max_bucket=64 \
  --out "$out/parity-b32-wide.json" >"$out/parity.log" 2>&1
verdicts+=("parity b32 wide exit $? $(tail -1 "$out/parity.log")")
python3 - "$out/decode-loop-wide.json" "$out/decode-loop-cublaslt.json" <<'PY'
import json, sys
rows = {}
for i, path in enumerate(sys.argv[1:]):
    try:
        report = json.load(open(path))
    except (OSError, ValueError) as e:
        print(f"{path}: {e}")
        continue
    for r in report.get("rows", []):
        rows.setdefault((r.get("scenario"), r.get("driver")), [None, None])[i] = r.get("step_us")
print("scenario | driver | wide GEMV us/step | cuBLASLt us/step")
for (scenario, driver), (wide, cublas) in rows.items():
    f = lambda v: "-" if v is None else f"{v:.1f}"
    print(f"{scenario} | {driver} | {f(wide)} | {f(cublas)}")
PY
printf '%s\n' "${verdicts[@]}"
