# After search_then_trainings.sh, on the same machine (detached, started in the same call): the fused
# kernels' twin-loss check and the ceiling sweep, with the search's compile cache. Output in /tmp/final;
# `bash bench/device/poll.sh 540 CHECKSDONE` waits for it.
cat > /tmp/checks_inner.sh <<'INNER'
cd /tmp/p
export PYTHONPATH=/tmp/site:/tmp/p PYTHONUNBUFFERED=1
R=/tmp/final
until grep -q ALLDONE $R/search.log 2>/dev/null; do sleep 5; done
CC=$PWD/out/search/compile-cache
export TORCHINDUCTOR_CACHE_DIR=$CC/inductor TRITON_CACHE_DIR=$CC/triton
# Twin loss: the full 10.24M-token budget, bf16, CUDA graphs, sqrt lr; fused vs torch at batch 64 and 128,
# two seeds; four at a time on the GPU (loss only: their tok/s share the GPU and mean nothing).
TR="python3 -m trainables.train --config configs/default.yaml --data tinyshakespeare.txt --json"
TR="$TR --set precision=bf16 --set compile=reduce-overhead --set lr_scaling=sqrt"
for B in 128 64; do
  for S in 1337 1338; do
    for K in fused torch; do
      $TR --set batch_size=$B --set seed=$S --set kernels=$K > $R/twin_${K}_b${B}_s${S}.json 2> $R/twin_${K}_b${B}_s${S}.err &
    done
  done
  wait
  echo "TWIN b$B $(date -u +%FT%TZ)" >> $R/search.log
done
python3 bench/ceiling.py --data tinyshakespeare.txt --batches 128,256,512,64 --precisions bf16 \
  --compiles reduce-overhead --kernels fused,torch --steps 40 --profile --out $R/ceiling > $R/ceiling.md 2> $R/ceiling.err
echo "CHECKSDONE $(date -u +%FT%TZ)" >> $R/search.log
INNER
(setsid nohup bash /tmp/checks_inner.sh > /tmp/checks_driver.log 2>&1 &)
echo checks queued
