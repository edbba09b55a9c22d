# Issue 43's sitting on one H200 (kind nvidia-h200), cold caches: the workload set's GPU configs but
# hybrid-100m (which has its own sitting: bench/device/remeasure_100m.sh and size_sitting.sh), each search
# followed by its pair alone (OUT/recipe.yaml, the usual hand recipe, then OUT/best.yaml, ROUNDS times each,
# alternating), one table: bench/workloads.py. ~20-25 device minutes.
#   call 1: source bench/device/setup.sh && bash bench/device/workloads.sh && bash bench/device/poll.sh 500 ALLDONE
#   then:   bash bench/device/poll.sh 560 ALLDONE   (back to back, until ALLDONE; $OUT/final.tgz each time)
# ONLY=nanogpt,digits runs a part of the set.
set -u
source bench/device/stage.sh
cat > /tmp/wl_inner.sh <<INNER
cd /tmp/p
export PYTHONPATH=/tmp/site:/tmp/p PYTHONUNBUFFERED=1 XDG_CACHE_HOME=/tmp/xdg-wl
echo "START workloads \$(date -u +%FT%TZ) \$(cat gitrev) \$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) \$(nproc) cpus" >> $R/search.log
T=\$(date +%s)
python3 bench/workloads.py --size gpu --only ${ONLY:-nanogpt,hybrid,digits,hf_llama} --rounds ${ROUNDS:-1} --data /tmp/p/tinyshakespeare.txt --out $R/wl > $R/workloads.log 2>&1
echo "EXIT workloads \$? after \$(( \$(date +%s) - T )) s" >> $R/search.log
for d in $R/wl/*/; do rm -rf \$d/ray \$d/trials \$d/tensorboard \$d/*.journal; done
echo "ALLDONE \$(date -u +%FT%TZ)" >> $R/search.log
INNER
(setsid nohup bash /tmp/wl_inner.sh > /tmp/wl_inner.out 2>&1 &)
sleep 2; tail -3 $R/search.log
