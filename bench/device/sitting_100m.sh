# Issues 43 and 46 on one H200 (kind nvidia-h200), one sitting, ~24 device minutes (~32 with TUNE=1):
# (1) with TUNE=1 only (they ship since 61fa1cd): the fused kernels' autotune results for
#     configs/hybrid-100m.yaml's shapes (bench/tune_fused.py --config, the cold and bench passes, bf16 and
#     fp32, 476 s on an H200), merged into the shipped set of this copy;
# (2) `python -m tuner.search --config configs/hybrid-100m.yaml` cold (a fresh XDG_CACHE_HOME), with the
#     GPU's compute processes and utilisation every 5 s (gpu.log: was the screen ever left with nothing?);
# (3) the README's GPU command cold (issue 43's default-search figure), if the lease lasts.
#   call 1: source bench/device/setup.sh && bash bench/device/sitting_100m.sh && bash bench/device/poll.sh 500 ALLDONE
#   then:   bash bench/device/poll.sh 560 ALLDONE   (back to back, until ALLDONE; $OUT/final.tgz each time)
set -u
source bench/device/stage.sh
cat > /tmp/s100_inner.sh <<'INNER'
cd /tmp/p
export PYTHONPATH=/tmp/site:/tmp/p PYTHONUNBUFFERED=1 CUDA_VISIBLE_DEVICES=0
source bench/device/search_fns.sh  # search LABEL [ARGS], keep LABEL OUT; R=/tmp/final
( while true; do
    echo "$(date -u +%T) $(nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader) procs=$(nvidia-smi --query-compute-apps=pid --format=csv,noheader | wc -l)"
    sleep 5
  done > $R/gpu.log 2>&1 & )
if [ "${TUNE:-0}" = 1 ]; then
T=$(date +%s)
echo "START tune100 $(date -u +%FT%TZ) $(cat gitrev) $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) $(nproc) cpus" >> $R/search.log
python3 bench/tune_fused.py --config configs/hybrid-100m.yaml --precisions bf16,fp32 --results-only \
  --set-name sm90-100m --out /tmp/tune100 > $R/tune100.log 2>&1
echo "EXIT tune100 $? after $(( $(date +%s) - T )) s" >> $R/search.log
SET=model/ops/tuning_results/sm90-triton3.6.0
cp -rn /tmp/tune100/sm90-100m/cache/. $SET/cache/ && echo "MERGED $(find $SET -name '*.autotune.json' | wc -l) results" >> $R/search.log
tar czf $R/tune100.tgz -C /tmp/tune100 sm90-100m tune.json
fi
T=$(date +%s)
echo "START h100m $(date -u +%FT%TZ)" >> $R/search.log
XDG_CACHE_HOME=/tmp/xdg-100m python3 -m tuner.search --config configs/hybrid-100m.yaml --out out/h100m > $R/h100m.log 2>&1
echo "EXIT h100m $? after $(( $(date +%s) - T )) s" >> $R/search.log
keep h100m out/h100m
XDG_CACHE_HOME=/tmp/xdg-one search one --out out/one
keep one out/one
echo "ALLDONE $(date -u +%FT%TZ)" >> $R/search.log
INNER
(TUNE=${TUNE:-0} setsid nohup bash /tmp/s100_inner.sh > /tmp/s100_driver.log 2>&1 &)
sleep 2; tail -2 /tmp/final/search.log
