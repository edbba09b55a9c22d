# Issue 34 item 3 on one GPU: the ~94M hybrid (d 768, 8 layers, seq 512, rwkv 12 heads, mamba headdim 64)
# with the fused kernels, whose shapes the shipped autotune results do not cover: two processes one after
# the other, the same compile cache root (as a search's trials and best.yaml's run have it); the first
# autotunes cold, the second should read the results. compile_s is the first step (autotune + compile).
set -u
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
M="--set model.d_model=768 --set model.n_layers=8 --set seq_len=512 --set model.rwkv_n_heads=12 --set model.mamba_headdim=64"
R="--set precision=bf16 --set batch_size=16 --set kernels=fused --set max_steps=20 --set timing_warmup_steps=5 --set eval_interval=0 --set eval_tokens=8192"
for run in first second; do
  T=$(date +%s)
  python3 -m trainables.train --config configs/seed-baseline.yaml --data .gpu/tinyshakespeare.txt $M $R \
    --set compile_cache=/tmp/cc --json > $OUT/$run.json 2> $OUT/$run.err
  echo "$run exit $? after $(( $(date +%s) - T )) s: $(tail -1 $OUT/$run.json | python3 -c 'import json,sys; d=json.loads(sys.stdin.read()); print({k: d.get(k) for k in ("status","compile_s","tokens_per_s","compile_cache_use","params")})')"
done
du -sh /tmp/cc/*
