#!/usr/bin/env bash
# SPIRe's Figure-5 ablations (arXiv 2504.06419, §4) on specdec's models: the
# full draft and six variants, each without one technique, trained on the
# same budget and seed, then each one's held-out expected acceptance per
# depth and tau (train_report.json). Resumable: rerun the same command.
#   bash scripts/spire_ablations.sh [steps] [out-dir] [variant ...]
# Variants (default: all, in this order): full no-sparse-kv
# no-target-activations no-distillation no-pruned-init no-feedback omega-1.
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-300}
out=${2:-build/spire/ablations}
common=(--train build/data/train.u16 --heldout build/data/heldout.u16 --target models/target --layers 2
        --k 4 --batch 8 --seq-len 256 --lr 1e-3 --min-lr 1e-4 --warmup 50 --steps "$steps" --checkpoint-every 100
        --eval-windows "${EVAL_WINDOWS:-64}" --threads 2)
declare -A variants=(
  [full]=""
  [no-sparse-kv]="--dense"
  [no-target-activations]="--memory embedding"
  [no-distillation]="--hard-loss"
  [no-pruned-init]="--random-init"
  [no-feedback]="--no-feedback"
  [omega-1]="--omega 1"
)
all=(full no-sparse-kv no-target-activations no-distillation no-pruned-init no-feedback omega-1)
names=("${@:3}")
[ ${#names[@]} -eq 0 ] && names=("${all[@]}")
for name in "${names[@]}"; do
  [ -n "${variants[$name]+set}" ] || { echo "spire_ablations: unknown variant '$name' (${all[*]})" >&2; exit 2; }
done
for name in "${names[@]}"; do
  [ -f "$out/$name/train_report.json" ] && continue
  # shellcheck disable=SC2086
  ./build/bin/specdec train-spire "${common[@]}" ${variants[$name]} --out "$out/$name" | tail -2
done
printf '%-24s %8s  %s\n' variant tau "alpha by depth"
for name in "${names[@]}"; do
  [ -f "$out/$name/train_report.json" ] || continue
  /usr/bin/python3 - "$out/$name/train_report.json" "$name" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"{sys.argv[2]:<24} {r['heldout_tau']:8.3f}  " + " / ".join(f"{a:.3f}" for a in r['heldout_acceptance']))
PY
done
