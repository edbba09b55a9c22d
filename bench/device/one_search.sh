# The README's GPU command exactly, cold (a fresh XDG_CACHE_HOME), on GPU 0 of the machine the device tool
# lent, detached from the call (the tool re-syncs the checkout at each call): its log and exit in
# /tmp/final/search.log, what a sitting keeps of its OUT in /tmp/final/one/. About 6 device minutes on one H200.
#   call 1: source bench/device/setup.sh && bash bench/device/one_search.sh && bash bench/device/poll.sh 480 ALLDONE
#   then:   bash bench/device/poll.sh 540 ALLDONE   (back to back, until ALLDONE)
# Put a sitting in a script like this one, not in the call's command: one lease spent 508 s on an inline
# `bash -c '...'` launch that never started (its quoting), with nothing to say so until poll.sh's guard.
set -u
source bench/device/stage.sh
cat > /tmp/one_inner.sh <<'INNER'
cd /tmp/p
export PYTHONPATH=/tmp/site:/tmp/p PYTHONUNBUFFERED=1 CUDA_VISIBLE_DEVICES=0 XDG_CACHE_HOME=/tmp/xdg-one
source bench/device/search_fns.sh  # search LABEL [ARGS], keep LABEL OUT; R=/tmp/final
search one --out out/one
keep one out/one
echo "ALLDONE $(date -u +%FT%TZ)" >> $R/search.log
INNER
(setsid nohup bash /tmp/one_inner.sh > /tmp/one_driver.log 2>&1 &)
sleep 2; tail -2 /tmp/final/search.log
