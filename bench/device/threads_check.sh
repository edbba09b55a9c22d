# best.yaml's run alone, with the CPU threads its search's trials had (best.yaml's cpu_threads and
# compile_threads) and with the libraries' defaults, on an idle host and beside busy loops on half its
# CPUs; the seed baseline alone (300 steps) for the ratio; then the CUDA-graph GPU test. ~7 minutes.
# Needs the best.yaml to run in .gpu/best.yaml; `bash bench/device/threads_check.sh` leaves $OUT/threads.
set -u
R=$OUT/threads; mkdir -p $R
rm -rf /tmp/p && mkdir /tmp/p && tar cf - --exclude=./docs --exclude=./.gpu . | tar xf - -C /tmp/p
cp .gpu/tinyshakespeare.txt .gpu/best.yaml /tmp/p/ && cd /tmp/p
export PYTHONPATH=/tmp/site:/tmp/p PYTHONUNBUFFERED=1
TR="python3 -m trainables.train --data tinyshakespeare.txt --json"
BEST="$TR --config best.yaml --set compile_cache=/tmp/cc"
C=$(nproc); THREADS="--set cpu_threads=2 --set compile_threads=$(( C / 6 > 1 ? C / 6 : 1 ))"
run() { local L=$1; shift; T=$(date +%s); "$@" > $R/$L.json 2> $R/$L.err; echo "$L exit $? $(( $(date +%s) - T )) s" | tee -a $R/log; }
burn() { for i in $(seq 1 $((C / 2))); do python3 -c "while True: pass" & done; }
run baseline $TR --config configs/default.yaml --set max_steps=300
run cold_measured $BEST $THREADS
run idle_measured $BEST $THREADS
run idle_default $BEST
burn; sleep 2
run busy_measured $BEST $THREADS
run busy_default $BEST
run busy_measured2 $BEST $THREADS
run busy_default2 $BEST
kill $(jobs -p) 2>/dev/null; wait 2>/dev/null
timeout 200 python3 -m pytest -v -m gpu -p no:cacheprovider tests/test_fused_gpu.py -k cuda_graphs > $R/gpu_test.log 2>&1
echo "gpu test exit $?" | tee -a $R/log
for f in $R/*.json; do python3 -c "
import json,sys; d=json.loads(open('$f').read().strip().splitlines()[-1])
print('$f'.split('/')[-1], d['tokens_per_s'], d['step_ms_median'], d['cpu_own_cores'], d['cpu_others_cores'], d.get('cpu_threads'), d.get('compile_threads'), d['warmup_s'])" 2>/dev/null; done | tee -a $R/log
