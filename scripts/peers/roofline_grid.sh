#!/usr/bin/env bash
# Issue #44's roofline grid on one GPU, for one model preset: Baton's decode step (samples/tensor_parallel --tp=1,
# one run per context, every batch whose KV cache fits), the PyTorch peer over the same grid
# (long_context_peers.py: torch.compile'd step in a CUDA graph, SDPA native GQA; it skips the points that do not
# fit by itself), then combine_roofline.py into OUT_DIR/roofline-<model>.json. Run it on the GPU machine from
# the repository root after unpacking the build (scripts/pack_bin.sh); plot here afterwards (the GPU machines
# have no matplotlib): combine_roofline.py with the same inputs and --plot.
#
#   scripts/peers/roofline_grid.sh llama-3.2-1b $OUT            # the whole grid
#   scripts/peers/roofline_grid.sh llama-3.2-1b /tmp/r --dry-run  # print the commands, run nothing
#
# Environment: CONTEXTS (default 16,576,8192,32768), BATCHES (1,8,32,64,128), BIN (build/bin), STEPS (64),
# REPEATS (5), PEER_NEW_TOKENS (32), DEADLINE (seconds from the start after which no new run begins; 0: none),
# PARTS (baton,pytorch: which sides to run), GPU_GIB (the GPU's memory; default: nvidia-smi's).
# The peer runs once per context into its own file (pytorch-<model>-c<context>.json, rewritten after every
# point): it compiles and captures each point for about a minute, so a whole grid takes several calls (one
# context each, say); combine_roofline.py merges any number of Baton and peer files afterwards, and with
# --previous FILE an earlier call's combined file too (its points kept where no new file covers them: its raw
# files may be gone). The KV cache of a batch must fit in 85% of what the weights leave (Baton's sample refuses
# the whole run otherwise, so such batches are left out of it).
set -euo pipefail
model=${1:?usage: roofline_grid.sh MODEL OUT_DIR [--dry-run]}
out=${2:?usage: roofline_grid.sh MODEL OUT_DIR [--dry-run]}
dry=${3:-}
here=$(cd "$(dirname "$0")" && pwd)
bin=${BIN:-build/bin}
contexts=${CONTEXTS:-16,576,8192,32768}
batches=${BATCHES:-1,8,32,64,128}
steps=${STEPS:-64}
start=$(date +%s)
# Layers, key/value width and weight bytes of the presets the sample knows (samples/tensor_parallel/main.cc).
case "$model" in
  llama-3.2-1b) layers=16 kv_width=512 weight_gb=2.47 ;;
  llama-3.1-8b) layers=32 kv_width=1024 weight_gb=15.01 ;;
  *) echo "roofline_grid: unknown model '$model' (llama-3.2-1b or llama-3.1-8b)" >&2; exit 2 ;;
esac
if [ -n "${GPU_GIB:-}" ]; then gpu_gib=$GPU_GIB
elif [ "$dry" = --dry-run ]; then gpu_gib=80
else gpu_gib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1 | awk '{print $1 / 1024}')
fi
run() { echo "+ $*"; [ "$dry" = --dry-run ] || "$@"; }
late() { [ "${DEADLINE:-0}" -gt 0 ] && [ $(( $(date +%s) - start )) -gt "$DEADLINE" ]; }
mkdir -p "$out"
baton_files=()
IFS=, read -ra cs <<<"$contexts"
IFS=, read -ra bs <<<"$batches"
parts=${PARTS:-baton,pytorch}
for c in "${cs[@]}"; do
  [[ ,$parts, == *,baton,* ]] || break
  # The batches whose cache (context + steps + 64 positions, as the sample sizes it) fits.
  fit=$(python3 -c "
import sys
layers, kv, wgb, gib, c, steps = $layers, $kv_width, $weight_gb, $gpu_gib, $c, $steps
room = (gib * 2**30 - wgb * 1e9) * 0.85
print(','.join(b for b in sys.argv[1:] if 2 * layers * kv * 2 * int(b) * (c + steps + 64) <= room))
" "${bs[@]}")
  if [ -z "$fit" ]; then echo "roofline_grid: context $c: no batch fits"; continue; fi
  if late; then echo "roofline_grid: deadline: context $c not run"; continue; fi
  file="$out/baton-$model-c$c.json"
  run timeout 300 "$bin/tensor_parallel" --model="$model" --tp=1 --batches="$fit" --context="$c" --steps="$steps" \
    --repeats="${REPEATS:-5}" --parity_requests=0 --json="$file" || echo "roofline_grid: context $c failed"
  if [ "$dry" = --dry-run ] || [ -f "$file" ]; then baton_files+=("$file"); fi
done
checkpoint=/tmp/baton-roofline/$model
pytorch=()
if [[ ,$parts, == *,pytorch,* ]] && ! late; then
  [ -f "$checkpoint/config.json" ] || run python3 "$here/../checkpoints/make_checkpoint.py" --preset "$model" \
    --out "$checkpoint" --device cuda
  for c in "${cs[@]}"; do
    if late; then echo "roofline_grid: deadline: the peer at context $c not run"; continue; fi
    peer="$out/pytorch-$model-c$c.json"
    run python3 "$here/long_context_peers.py" --checkpoint "$checkpoint" --model "$model" --contexts "$c" \
      --batches "$batches" --new-tokens "${PEER_NEW_TOKENS:-32}" --repeats 3 --json "$peer" ||
      echo "roofline_grid: the PyTorch peer failed at context $c (its --json keeps the points it timed)"
    if [ "$dry" = --dry-run ] || [ -f "$peer" ]; then pytorch+=(--pytorch "$peer"); fi
  done
fi
if [ ${#baton_files[@]} -eq 0 ]; then
  echo "roofline_grid: no Baton file here: combine this run's peer files with Baton's (combine_roofline.py)"
  exit 0
fi
run python3 "$here/combine_roofline.py" --model "$model" --baton "${baton_files[@]}" "${pytorch[@]}" \
  --json "$out/roofline-$model.json"
echo "roofline_grid: done in $(( $(date +%s) - start )) s"
