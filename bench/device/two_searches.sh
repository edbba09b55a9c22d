# Issues 34 and 36 in one sitting on a 2-GPU host, one search per GPU at the same time, each pinned to half
# the host's cores (taskset) and with a cache dir of its own (XDG_CACHE_HOME: cold, nothing remembered):
#   GPU 0: the README's command exactly, cold; the pair alone (the seed baseline, 300 steps, then best.yaml);
#          the README's command again with a new --out (a remembered answer, confirmed); then the 94M
#          shape's fused autotune paid once (two processes of one config, the second should start fast).
#   GPU 1: `python -m tuner.search --config configs/hybrid-100m.yaml`, cold; then its pair alone (the plain
#          recipe and best.yaml, 300 steps each: the planned run is 1B tokens).
# Beside them, every 5 s, the compute processes NVML lists per GPU and what each is (gpu_procs.log): which
# process shares the GPU while the baseline's windows are timed (run X saw 2). Output in /tmp/final;
# `bash bench/device/poll.sh 540 ALLDONE` waits for both.
set -u
source bench/device/stage.sh
cat > /tmp/watch_procs.sh <<'WATCH'
while true; do
  echo "T $(date -u +%T)"
  nvidia-smi --query-compute-apps=gpu_uuid,pid,used_memory --format=csv,noheader 2>/dev/null | while IFS=, read -r gpu pid mem; do
    echo "  ${gpu: -4} $pid $mem $(ps -o args= -p $pid 2>/dev/null | cut -c1-120)"
  done
  sleep 5
done
WATCH
cat > /tmp/gpu0_inner.sh <<'INNER'
cd /tmp/p
export PYTHONPATH=/tmp/site:/tmp/p PYTHONUNBUFFERED=1 CUDA_VISIBLE_DEVICES=0 XDG_CACHE_HOME=/tmp/xdg-0
source bench/device/search_fns.sh  # search LABEL [ARGS], keep LABEL OUT; R=/tmp/final
search cold
keep cold out/search
TR="python3 -m trainables.train --data tinyshakespeare.txt --json"
$TR --config configs/default.yaml --set max_steps=300 > $R/cold/train_baseline.json 2> $R/cold/train_baseline.err
$TR --config out/search/best.yaml > $R/cold/train_best.json 2> $R/cold/train_best.err
echo "PAIR default $(date -u +%FT%TZ)" >> $R/search.log
search again --out out/search-again
keep again out/search-again
# the 94M shape pays its fused autotune once (issue 34): two processes of one fused config in turn, on a
# cache dir of their own; the first autotunes the new shapes, the second should start its first step in <= 30 s
export XDG_CACHE_HOME=/tmp/xdg-94m
for i in 1 2; do
  T=$(date +%s)
  python3 -m trainables.train --json --config configs/hybrid-100m.yaml --set max_steps=20 --set batch_size=16 \
    --set precision=bf16 --set compile=default --set compile_scope=blocks --set kernels=fused \
    > $R/autotune94m_$i.json 2> $R/autotune94m_$i.err
  echo "AUTOTUNE94M $i exit $? after $(( $(date +%s) - T )) s" >> $R/search.log
done
echo "GPU0DONE $(date -u +%FT%TZ)" >> $R/search.log
INNER
cat > /tmp/gpu1_inner.sh <<'INNER'
cd /tmp/p
export PYTHONPATH=/tmp/site:/tmp/p PYTHONUNBUFFERED=1 CUDA_VISIBLE_DEVICES=1 XDG_CACHE_HOME=/tmp/xdg-1
R=/tmp/final
T=$(date +%s)
echo "START h100m $(date -u +%FT%TZ) $(cat gitrev) GPU 1 $(nproc) cpus" >> $R/search.log
python3 -m tuner.search --config configs/hybrid-100m.yaml --out out/h100m > $R/h100m.log 2>&1
echo "EXIT h100m $? after $(( $(date +%s) - T )) s" >> $R/search.log
mkdir -p $R/h100m && cp out/h100m/summary.json out/h100m/report.md out/h100m/best.yaml $R/h100m/ 2>/dev/null
tar czf $R/h100m/trials.tgz -C out/h100m trials 2>/dev/null
TR="python3 -m trainables.train --json --set max_steps=300"
$TR --config configs/hybrid-100m.yaml > $R/h100m/train_plain.json 2> $R/h100m/train_plain.err
$TR --config out/h100m/best.yaml > $R/h100m/train_best.json 2> $R/h100m/train_best.err
echo "PAIR h100m $(date -u +%FT%TZ)" >> $R/search.log
du -sh /tmp/xdg-*/hybrid-tuner/* >> $R/search.log 2>&1
echo "GPU1DONE $(date -u +%FT%TZ)" >> $R/search.log
INNER
cat > /tmp/both_inner.sh <<'INNER'
N=$(nproc); H=$((N / 2))
bash /tmp/watch_procs.sh > /tmp/final/gpu_procs.log 2>&1 & W=$!
taskset -c 0-$((H - 1)) bash /tmp/gpu0_inner.sh & A=$!
taskset -c $H-$((N - 1)) bash /tmp/gpu1_inner.sh & B=$!
wait $A $B; kill $W
echo "ALLDONE $(date -u +%FT%TZ)" >> /tmp/final/search.log
INNER
(setsid nohup bash /tmp/both_inner.sh > /tmp/both_driver.log 2>&1 &)
sleep 1; echo started
