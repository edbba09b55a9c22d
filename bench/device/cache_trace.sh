# Why a search's loss-check runs miss the compile cache on a GPU (docs/benchmarks.md): a short search
# from .gpu/src.tar with torch's structured trace on (its trials inherit TORCH_TRACE from the driver), then
# which run hit or missed Inductor's FX graph cache and with which keys. ~6 device minutes on one H200.
# Call: source bench/device/setup.sh && bash bench/device/cache_trace.sh   -> $OUT/cache_trace.tgz
set -u
R=/tmp/ct; rm -rf $R /tmp/q && mkdir -p $R/trace /tmp/q && tar xf .gpu/src.tar -C /tmp/q
cp .gpu/tinyshakespeare.txt /tmp/q/
cd /tmp/q && export PYTHONPATH=/tmp/site:/tmp/q PYTHONUNBUFFERED=1
T=$(date +%s)
TORCH_TRACE=$R/trace timeout 500 python3 -m tuner.search --config configs/default.yaml \
  --data tinyshakespeare.txt --out $R/out --trials 3 --set train.tokens=2048000 \
  --set search.probe_batch=false --set search.repeats=1 --set search.baseline_repeats=1 > $R/search.log 2>&1
echo "EXIT $? after $(( $(date +%s) - T )) s" >> $R/search.log
python3 bench/trace_cache_keys.py $R/trace --summary $R/out/summary.json --dump $R/keys.json \
  > $R/cache_by_trial.txt 2>&1
cat $R/cache_by_trial.txt; tail -3 $R/search.log
tar czf $OUT/cache_trace.tgz -C $R search.log cache_by_trial.txt keys.json out/summary.json
