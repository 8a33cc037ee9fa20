#!/usr/bin/env bash
# `specdec train` killed with SIGKILL at random moments (checkpoints every 2
# steps, so many kills land inside one), then resumed: every restart resumes
# from a checkpoint at least as late as the last one it reported, and the
# last run finishes with a model that loads. A disk that fills while a
# checkpoint is written (a file-size limit: write() fails as on a full disk)
# stops the run with the file named and the previous checkpoint intact; a
# bit flipped in the model's weights is refused when it loads; a second run
# beside a live one is refused. A tiny random-token model, so each step
# takes milliseconds.
#   kill_resume_test.sh SPECDEC_BINARY [KILLS=8] [SEED=1]   (KEEP=1: keep the work directory)
set -uo pipefail
specdec=$1 kills=${2:-8} seed=${3:-1}
work=$(mktemp -d)
[ -n "${KEEP:-}" ] && echo "work: $work" || trap 'rm -rf "$work"' EXIT
cd "$work"
/usr/bin/python3 - <<'PY'
import random, struct
random.seed(1)
open("train.bin", "wb").write(struct.pack("<20000H", *[random.randrange(64) for _ in range(20000)]))
open("held.bin", "wb").write(struct.pack("<2000H", *[random.randrange(64) for _ in range(2000)]))
PY
cat > cfg.json <<'JSON'
{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu", "hidden_size": 32,
 "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16,
 "vocab_size": 64, "max_position_embeddings": 64, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
 "tie_word_embeddings": true, "bos_token_id": 1, "eos_token_id": 2}
JSON
train() {  # exec: in `train &`, $! is then the trainer itself, not a subshell around it; OUT: its directory
  exec "$specdec" train --config cfg.json --train train.bin --heldout held.bin --out "${OUT:-out}" --steps 4000 --batch 2 \
    --seq-len 32 --checkpoint-every 2 --threads 1 --eval-windows 4 "$@"
}
fail() { echo "FAIL: $*"; tr '\r' '\n' < log | grep -v '^\[' | tail -5; exit 1; }
RANDOM=$seed
last=0  # the latest step a run resumed from
for i in $(seq 1 "$kills"); do
  ( train ) > log 2>&1 &
  pid=$!
  sleep "$(( 1 + RANDOM % 2 )).$(( RANDOM % 10 ))"  # 1.0 to 2.9 s in (libtorch loads in about 1 s)
  kill -9 "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  resumed=$(grep -ao 'resuming from out/checkpoint at step [0-9]*' log | grep -o '[0-9]*$')
  if [ -n "$resumed" ]; then
    [ "$resumed" -ge "$last" ] || fail "kill $i: resumed from step $resumed after step $last"
    last=$resumed
  fi
  echo "kill $i: ${resumed:+resumed from step $resumed, }killed after $(tr '\r' '\n' < log | grep -ao 'step [0-9]*' | tail -1)"
done
( train ) > log 2>&1 || fail "the last run, after $kills kills, exited $?"
final=$(grep -ao 'resumed from step [0-9]*' log | grep -o '[0-9]*$')
[ -n "$final" ] && [ "$final" -ge "$last" ] || fail "the last run resumed from step ${final:-none}, after step $last"
summary=$(tr '\r' '\n' < log | grep -a '^trained')
[ -s out/model.safetensors ] && [ -s out/config.json ] || fail "no model"
"$specdec" train --config cfg.json --train train.bin --heldout held.bin --out out2 --steps 1 --batch 2 --seq-len 32 \
  --threads 1 --eval-windows 4 --init-from out > log 2>&1 || fail "the model does not load (--init-from)"
echo "after $kills kills: $summary"
# A flipped bit in the weights' data: the file's checksum refuses it.
cp -r out flipped
/usr/bin/python3 -c "
import sys; p = 'flipped/model.safetensors'; b = bytearray(open(p, 'rb').read()); b[-3] ^= 0x10
open(p, 'wb').write(b)"
"$specdec" train --config cfg.json --train train.bin --heldout held.bin --out out3 --steps 1 --batch 2 --seq-len 32 \
  --threads 1 --eval-windows 4 --init-from flipped > log 2>&1 && fail "a model with a flipped bit loaded"
grep -aq "flipped/model.safetensors: the data region fails its checksum" log || { cat log; fail "the refusal does not say why"; }
echo "a flipped bit in the weights: refused"
# The disk fills during a checkpoint: a checkpoint at step 2, then a run that
# cannot write the next (files over 40 KB refused), then a resume from step 2.
rm -rf out3
( OUT=out3 train --max-steps-this-run 2 ) > log 2>&1 || fail "the first run of out3 exited $?"
( trap '' XFSZ; ulimit -f 40; OUT=out3 train ) > log 2>&1 && fail "a run that cannot write its checkpoint succeeded"
grep -aq "cannot write: File too large" log || { cat log; fail "the failed write is not named"; }
( OUT=out3 train --max-steps-this-run 2 ) > log 2>&1 || fail "the run after the full disk exited $?"
grep -aq 'resuming from out3/checkpoint at step 2' log || { cat log; fail "the checkpoint before the full disk was lost"; }
echo "a disk full during a checkpoint: the run stops naming the file, the checkpoint before it resumes"
# A second run on a directory a live run trains into is refused, naming it.
rm -rf out
( train ) > log 2>&1 &
pid=$!
for _ in $(seq 1 100); do grep -aq 'step [0-9]' log && break; sleep 0.1; done
( train ) > log2 2>&1 && fail "a second run on out/ was not refused"
grep -aq "out: another run is training into this directory" log2 || { cat log2; fail "the refusal does not say why"; }
kill -9 "$pid"
wait "$pid" 2>/dev/null
echo "a second run beside a live one: refused"
