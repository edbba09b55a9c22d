# Issue 34, more GPUs give a sooner answer: the README's command exactly, cold, on one GPU of this host
# (CUDA_VISIBLE_DEVICES=0), then cold on all of its GPUs, back to back in one sitting. Each has a cache dir
# of its own (XDG_CACHE_HOME: no compile cache, no remembered answer), so both compile everything.
# Output in /tmp/final; `bash bench/device/poll.sh 540 ALLDONE` waits.
set -u
source bench/device/stage.sh
cat > /tmp/ratio_inner.sh <<'INNER'
cd /tmp/p
export PYTHONPATH=/tmp/site:/tmp/p PYTHONUNBUFFERED=1
R=/tmp/final
search() {  # $1: the label, $2: CUDA_VISIBLE_DEVICES
  local L=$1 T=$(date +%s)
  echo "START $L $(date -u +%FT%TZ) $(cat gitrev) GPUs $2 $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) $(nproc) cpus" >> $R/search.log
  CUDA_VISIBLE_DEVICES=$2 XDG_CACHE_HOME=/tmp/xdg-$L python3 -m tuner.search --config configs/default.yaml \
    --data tinyshakespeare.txt --out out/$L > $R/$L.log 2>&1
  echo "EXIT $L $? after $(( $(date +%s) - T )) s" >> $R/search.log
  mkdir -p $R/$L && cp out/$L/summary.json out/$L/report.md out/$L/best.yaml $R/$L/ 2>/dev/null
  tar czf $R/$L/trials.tgz -C out/$L trials 2>/dev/null
}
ALL=$(nvidia-smi --query-gpu=index --format=csv,noheader | paste -sd,)
search one 0
search all $ALL
echo "ALLDONE $(date -u +%FT%TZ)" >> $R/search.log
INNER
(setsid nohup bash /tmp/ratio_inner.sh > /tmp/ratio_driver.log 2>&1 &)
sleep 1; echo started
