# Issues 34 and 36 in one sitting on a 2-GPU host, one search per GPU at the same time, each pinned to half
# the host's cores (taskset) and with a cache dir of its own (XDG_CACHE_HOME: cold, nothing remembered):
#   GPU 0: the README's command exactly, cold; the pair alone (the seed baseline, 300 steps, then best.yaml);
#          the README's command again with a new --out (a remembered answer, confirmed).
#   GPU 1: `python -m tuner.search --config configs/hybrid-100m.yaml`, cold; then its pair alone (the plain
#          recipe and best.yaml, 300 steps each: the planned run is 1B tokens).
# Then, with the host to itself, the multi-GPU ratio like for like (issue 34): the README's command cold on
# both GPUs, then on GPU 0 alone, each with all the cores and a cache dir of its own.
# Beside them, every 5 s, the compute processes NVML lists per GPU and what each is (gpu_procs.log): which
# process shares the GPU while the baseline's windows are timed (one search saw 2). Output in /tmp/final;
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
wait $A $B
echo "BOTHDONE $(date -u +%FT%TZ)" >> /tmp/final/search.log
cd /tmp/p && export PYTHONPATH=/tmp/site:/tmp/p PYTHONUNBUFFERED=1 && source bench/device/search_fns.sh
XDG_CACHE_HOME=/tmp/xdg-2g search twogpu --out out/search-2g; keep twogpu out/search-2g
XDG_CACHE_HOME=/tmp/xdg-1g CUDA_VISIBLE_DEVICES=0 search onegpu --out out/search-1g; keep onegpu out/search-1g
kill $W
echo "ALLDONE $(date -u +%FT%TZ)" >> /tmp/final/search.log
INNER
(setsid nohup bash /tmp/both_inner.sh > /tmp/both_driver.log 2>&1 &)
sleep 1; echo started
