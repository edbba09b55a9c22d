# Issue 54 item 1 on GPU 0 of the machine the device tool lent, detached from the call: a workload's search
# exactly as a user runs it (`python -m tuner.search --config $CONFIG --data tinyshakespeare.txt --out
# out/$LABEL`, cold: a fresh XDG_CACHE_HOME), then bench/oracle.py on the same config with the search's
# best.yaml as --answer, its runs reading the compile cache the search filled (--compile-cache). Log lines
# and exits in /tmp/final/search.log, the search's OUT kept in /tmp/final/$LABEL/, the oracle's OUT (oracle.json,
# oracle.md, the runs' configs) in /tmp/final/oracle-$LABEL/, which poll.sh packs as it goes (oracle.json is
# rewritten after every run: a lease that ends mid-sitting keeps what finished).
#   call 1: source bench/device/setup.sh && bash bench/device/oracle.sh && bash bench/device/poll.sh 480 ALLDONE
#   then:   bash bench/device/poll.sh 560 ALLDONE   (back to back, until ALLDONE; $OUT/final.tgz each time)
# Environment: CONFIG (default examples/nanogpt/gpu.yaml), LABEL (default: the config's folder or file name),
# ORACLE_ARGS (the oracle's sample flags; default: nanoGPT's batch-64 point, its 16 precision x compile
# configs: fits one lease, see bench/device/README.md), SET (--set flags given to both, as a user would),
# DATA (default tinyshakespeare.txt; empty: each resolves its own). A carried .gpu/best.yaml skips the
# search and is the answer; a carried .gpu/oracle.json resumes an earlier lease's oracle (same flags).
set -u
source bench/device/stage.sh
[ -f .gpu/best.yaml ] && cp .gpu/best.yaml /tmp/p/carried-best.yaml
[ -f .gpu/oracle.json ] && cp .gpu/oracle.json /tmp/p/carried-oracle.json
CONFIG=${CONFIG:-examples/nanogpt/gpu.yaml}
DEFAULT_LABEL=$(basename "$(dirname "$CONFIG")"); [ "$DEFAULT_LABEL" = configs ] && DEFAULT_LABEL=$(basename "$CONFIG" .yaml)
export CONFIG LABEL=${LABEL:-$DEFAULT_LABEL} SET=${SET:-} DATA=${DATA-tinyshakespeare.txt}
export ORACLE_ARGS=${ORACLE_ARGS---knobs precision,compile --points batch_size=64 --points lr_scaling=none}
cat > /tmp/oracle_inner.sh <<'INNER'
cd /tmp/p
export PYTHONPATH=/tmp/site:/tmp/p PYTHONUNBUFFERED=1 CUDA_VISIBLE_DEVICES=0 XDG_CACHE_HOME=/tmp/xdg-oracle
source bench/device/search_fns.sh  # keep LABEL OUT; R=/tmp/final
D=(); [ -n "$DATA" ] && D=(--data "$DATA")
echo "START $LABEL $(date -u +%FT%TZ) $(cat gitrev) $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) $(nproc) cpus: $CONFIG $SET | $ORACLE_ARGS" >> $R/search.log
ANSWER=out/$LABEL/best.yaml
if [ -f carried-best.yaml ]; then
  ANSWER=carried-best.yaml; echo "ANSWER carried .gpu/best.yaml: no search" >> $R/search.log
else
  T=$(date +%s)
  python3 -m tuner.search --config "$CONFIG" "${D[@]}" $SET --out out/$LABEL > $R/$LABEL.search.log 2>&1
  echo "EXIT search $? after $(( $(date +%s) - T )) s" >> $R/search.log
  keep $LABEL out/$LABEL
fi
A=(); [ -f $ANSWER ] && A=(--answer $ANSWER)
mkdir -p $R/oracle-$LABEL && [ -f carried-oracle.json ] && cp carried-oracle.json $R/oracle-$LABEL/oracle.json
CACHE=$(python3 -c 'from trainables.training.compile_cache import default_root; print(default_root())')
T=$(date +%s)
python3 bench/oracle.py --config "$CONFIG" "${D[@]}" $SET "${A[@]}" --compile-cache "$CACHE" \
  --out $R/oracle-$LABEL $ORACLE_ARGS > $R/$LABEL.oracle.log 2>&1
echo "EXIT oracle $? after $(( $(date +%s) - T )) s: $(grep -o '"answer_over_oracle": [0-9.e-]*' $R/oracle-$LABEL/oracle.json)" >> $R/search.log
echo "ALLDONE $(date -u +%FT%TZ)" >> $R/search.log
INNER
(setsid nohup bash /tmp/oracle_inner.sh > /tmp/oracle_driver.log 2>&1 &)
sleep 2; tail -2 /tmp/final/search.log
