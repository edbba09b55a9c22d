# Issue 43's workload sitting split over the GPUs of one host: one workload per GPU at the same time (each
# pinned to its share of the cores, a cold cache dir of its own), each search followed by its pair alone on
# its GPU (bench/workloads.py, as bench/device/workloads.sh runs it on one GPU). A GPU and its cores per
# workload is what the one-H200 kind gives one search (16 cores), so on a 2x H200 host two entries take the
# time of one. WL="0:nanogpt 1:hf_llama" (GPU:entry pairs) picks them; AFTER=MARKER starts them only once
# MARKER is in /tmp/final/search.log (after gpus_ratio.sh's ALLDONE: it runs from the same /tmp/p, which
# must be staged already). Done: WLDONE in /tmp/final/search.log; `bash bench/device/poll.sh 540 WLDONE`.
set -u
R=/tmp/final
[ -d /tmp/p ] || source bench/device/stage.sh
cat > /tmp/wl_split_inner.sh <<INNER
while [ -n "${AFTER:-}" ] && ! grep -q "${AFTER:-}" $R/search.log 2>/dev/null; do sleep 5; done
cd /tmp/p
export PYTHONPATH=/tmp/site:/tmp/p PYTHONUNBUFFERED=1
N=\$(nproc); G=\$(nvidia-smi -L | wc -l); PER=\$((N / G))
for pair in ${WL:-0:nanogpt 1:hf_llama}; do
  gpu=\${pair%%:*} entry=\${pair#*:}
  (
    echo "START wl-\$entry \$(date -u +%FT%TZ) \$(cat gitrev) GPU \$gpu \$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) \$PER cpus" >> $R/search.log
    T=\$(date +%s)
    CUDA_VISIBLE_DEVICES=\$gpu XDG_CACHE_HOME=/tmp/xdg-wl-\$gpu taskset -c \$((gpu * PER))-\$((gpu * PER + PER - 1)) \
      python3 bench/workloads.py --size gpu --only \$entry --rounds 1 --data /tmp/p/tinyshakespeare.txt \
      --out $R/wl-\$entry > $R/wl-\$entry.log 2>&1
    echo "EXIT wl-\$entry \$? after \$(( \$(date +%s) - T )) s" >> $R/search.log
    rm -rf $R/wl-\$entry/*/ray $R/wl-\$entry/*/trials $R/wl-\$entry/*/tensorboard $R/wl-\$entry/*/*.journal
  ) &
done
wait
echo "WLDONE \$(date -u +%FT%TZ)" >> $R/search.log
INNER
(setsid nohup bash /tmp/wl_split_inner.sh > /tmp/wl_split_inner.out 2>&1 &)
sleep 1; echo "workloads split: started (after ${AFTER:-nothing})"
