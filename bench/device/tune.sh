# The fused kernels' autotune cost per process (cold, benchmark only, warm, shipped) and the sm_90 set to
# ship: bench/tune_fused.py, detached, from a copy of the checkout; then waits up to $1 s (default 520)
# and packs /tmp/tune (tune.json, the log, the set) into $OUT/tune.tgz. Poll again with `bash
# bench/device/tune.sh poll 500` if it has not finished.
set -u
if [ "${1:-}" != poll ]; then
  rm -rf /tmp/tp /tmp/tune && mkdir -p /tmp/tp /tmp/tune && tar xf .gpu/src.tar -C /tmp/tp
  (cd /tmp/tp && setsid nohup bash -c 'PYTHONPATH=/tmp/site:/tmp/tp python3 bench/tune_fused.py --out /tmp/tune > /tmp/tune/log 2>&1; echo TUNEDONE >> /tmp/tune/log' > /dev/null 2>&1 &)
  W=${1:-520}
else
  W=${2:-500}
fi
for i in $(seq 1 $((W / 10))); do
  grep -q TUNEDONE /tmp/tune/log 2>/dev/null && break
  sleep 10
done
grep -v "^{" /tmp/tune/log | tail -30
grep "^{" /tmp/tune/log | cut -c1-200
tar czf $OUT/tune.tgz -C /tmp tune/log tune/tune.json tune/sm90 2>/dev/null
