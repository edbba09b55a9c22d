# Run G (one GPU, cold machine): the default search exactly as the README gives it, from the working tree
# the device got (a clean checkout of the commit in .gpu/gitrev), then the seed baseline and best.yaml alone,
# one after the other, then the GPU tests (at most TESTS_S seconds).
set -u
source bench/device/stage.sh
cat > /tmp/final_inner.sh <<'INNER'
cd /tmp/p
export PYTHONPATH=/tmp/site:/tmp/p PYTHONUNBUFFERED=1
R=/tmp/final
T=$(date +%s); echo "START $(date -u +%FT%TZ) $(cat gitrev) $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) x$(nvidia-smi -L | wc -l) $(nproc) cpus" > $R/search.log
python3 -m tuner.search --config configs/default.yaml --data tinyshakespeare.txt >> $R/search.log 2>&1
echo "EXIT $? after $(( $(date +%s) - T )) s" >> $R/search.log
cp out/search/summary.json out/search/report.md out/search/report.html out/search/best.yaml $R/ 2>/dev/null
TR="python3 -m trainables.train --data tinyshakespeare.txt --json"
$TR --config configs/default.yaml --set max_steps=300 > $R/train_baseline.json 2> $R/train_baseline.err
echo "BASE $(date -u +%FT%TZ)" >> $R/search.log
$TR --config out/search/best.yaml > $R/train_best.json 2> $R/train_best.err
echo "PAIR $(date -u +%FT%TZ)" >> $R/search.log
timeout ${TESTS_S:-300} python3 -m pytest -v -m gpu -p no:cacheprovider tests/test_fused_gpu.py > $R/gpu_tests.log 2>&1
echo "GPUTESTS exit $? $(date -u +%FT%TZ)" >> $R/search.log
echo "ALLDONE $(date -u +%FT%TZ)" >> $R/search.log
INNER
(setsid nohup bash /tmp/final_inner.sh > /tmp/final_driver.log 2>&1 &)
sleep 1; echo started
