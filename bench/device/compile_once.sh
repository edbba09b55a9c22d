# Issue 34 on one GPU, in one sitting: the README's command exactly, cold (no compile cache, no remembered
# answer on the machine); then, alone, the seed baseline (300 steps) and best.yaml of that search (the pair);
# then the README's command again with a new --out (caches warm: a remembered answer, confirmed); then the
# regional-compilation GPU tests (GPU_TESTS=0 skips them), and where a process's imports go. Output in /tmp/final; `bash bench/device/poll.sh 540 ALLDONE` waits.
set -u
source bench/device/stage.sh
cat > /tmp/once_inner.sh <<'INNER'
cd /tmp/p
export PYTHONPATH=/tmp/site:/tmp/p PYTHONUNBUFFERED=1 CUDA_VISIBLE_DEVICES=0
source bench/device/search_fns.sh  # search LABEL [ARGS], keep LABEL OUT; R=/tmp/final
search cold
keep cold out/search
TR="python3 -m trainables.train --data tinyshakespeare.txt --json"
$TR --config configs/default.yaml --set max_steps=300 > $R/cold/train_baseline.json 2> $R/cold/train_baseline.err
$TR --config out/search/best.yaml > $R/cold/train_best.json 2> $R/cold/train_best.err
echo "PAIR $(date -u +%FT%TZ)" >> $R/search.log
search again --out out/search-again
keep again out/search-again
du -sh ~/.cache/hybrid-tuner/* >> $R/search.log 2>&1
if [ "${GPU_TESTS:-1}" = 1 ]; then
  timeout 420 python3 -m pytest -v -m gpu -p no:cacheprovider tests/test_fused_gpu.py -k blocks > $R/gpu_tests.log 2>&1
  echo "GPUTESTS exit $? $(date -u +%FT%TZ)" >> $R/search.log
fi
# Where a trial process's start goes (issue 34 item 5): the imports, warm from the page cache by now.
for m in torch ray.tune trainables.trainable; do
  python3 -X importtime -c "import $m" 2> $R/importtime_${m//./_}.txt
  echo "IMPORT $m $(tail -1 $R/importtime_${m//./_}.txt)" >> $R/search.log
done
# the fused kernels as a trial loads them (load_fused: fla's and mamba_ssm's package __init__ skipped),
# then as a plain import would (every fla model and op, transformers with mamba_ssm's models)
for op in rwkv6 ssd causal_conv1d; do
  python3 -c "import time, torch; t=time.time(); from model.ops._backend import load_fused; k, why = load_fused('$op'); print(f'LOADFUSED $op {time.time()-t:.1f} s {why or \"ok\"}')" >> $R/search.log 2>&1
done
python3 -c "import time, torch; t=time.time(); from model.ops import available_backends; b = available_backends(); print(f'BACKENDS {time.time()-t:.1f} s {b}')" >> $R/search.log 2>&1
for m in model.ops.rwkv6_fused model.ops.ssd_fused; do
  python3 -c "import time, torch; t=time.time(); import $m; print(f'PLAINIMPORT $m {time.time()-t:.1f} s')" >> $R/search.log 2>&1
done
python3 -c "import time; t=time.time(); import torch; torch.zeros(1, device='cuda'); print(f'CUDAINIT {time.time()-t:.1f} s')" >> $R/search.log 2>&1
echo "ALLDONE $(date -u +%FT%TZ)" >> $R/search.log
INNER
(setsid nohup bash /tmp/once_inner.sh > /tmp/once_driver.log 2>&1 &)
sleep 1; echo started
