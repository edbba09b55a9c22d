# Issue 36, why the 100M search's re-measure lost 7 of its 9 runs at once (one H200: ActorDiedError 34 s in,
# as its profiled finalist ended): configs/hybrid-100m.yaml shrunk to a short search (2 start points, a
# 2-minute screen, a 2M-token loss prefix after a 0.5M warm-up), cold, on one GPU, then every log that says
# how a process ended: the trials' error files, the Ray session's raylet and worker logs of the dead,
# and the kernel's. Output in /tmp/final; `bash bench/device/poll.sh 540 ALLDONE` waits.
set -u
source bench/device/stage.sh
cat > /tmp/rm100_inner.sh <<'INNER'
cd /tmp/p
export PYTHONPATH=/tmp/site:/tmp/p PYTHONUNBUFFERED=1 CUDA_VISIBLE_DEVICES=0 XDG_CACHE_HOME=/tmp/xdg-rm
R=/tmp/final
T=$(date +%s)
echo "START rm100 $(date -u +%FT%TZ) $(cat gitrev) $(nproc) cpus" >> $R/search.log
python3 -m tuner.search --config configs/hybrid-100m.yaml --out out/rm100 --set search.trials=2 \
  --set search.time_budget=2m --set quality.loss_horizon=2M --set train.warmup_frac=0.0005 > $R/rm100.log 2>&1
echo "EXIT rm100 $? after $(( $(date +%s) - T )) s" >> $R/search.log
mkdir -p $R/rm100 && cp out/rm100/summary.json out/rm100/report.md $R/rm100/ 2>/dev/null
tar czf $R/rm100/trials.tgz -C out/rm100 trials 2>/dev/null
find out/rm100/ray/remeasure -name "error.txt" -exec sh -c 'echo "== $1"; tail -40 "$1"' _ {} \; > $R/rm100/errors.txt 2>&1
L=$(ls -d /tmp/ray/session_*/logs | tail -1)
grep -h -iE "kill|died|exit|oom|memory|signal" $L/raylet.out | tail -80 > $R/rm100/raylet.txt 2>&1
for f in $(grep -l -iE "fatal|segmentation|killed|abort|Error" $L/worker-*.err 2>/dev/null | head -12); do
  echo "== $f"; tail -30 $f; done > $R/rm100/workers.txt 2>&1
dmesg 2>/dev/null | tail -40 > $R/rm100/dmesg.txt
free -g >> $R/rm100/dmesg.txt
echo "ALLDONE $(date -u +%FT%TZ)" >> $R/search.log
INNER
(setsid nohup bash /tmp/rm100_inner.sh > /tmp/rm100_driver.log 2>&1 &)
sleep 1; echo started
