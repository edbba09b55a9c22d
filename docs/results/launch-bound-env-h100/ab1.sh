# One call: unpack the bundle, then 4 interleaved rounds of env_ab.py's modes; results in $OUT/ab.txt
source .gpu/setup.sh
export PYTHONPATH=/tmp/site:$PWD
cp .gpu/tinyshakespeare.txt .
lscpu | grep -E "Thread|Core|Socket|Model name|NUMA" > $OUT/ab.txt
for r in 1 2 3 4; do
  for m in plain thread tune; do if [ $m = thread ]; then export OMP_NUM_THREADS=2; else unset OMP_NUM_THREADS; fi; python3 bench/launch_env_ab.py $m 2>/dev/null | grep AB | tee -a $OUT/ab.txt; done; unset OMP_NUM_THREADS
  (setsid python3 bench/launch_env_ab.py background > /tmp/bg.log 2>&1 &) ; sleep 12
  ps -eo pcpu,comm --sort=-pcpu | head -8 >> $OUT/ab.txt
  python3 bench/launch_env_ab.py bgplain 2>/dev/null | grep AB | tee -a $OUT/ab.txt
  ps -eo pcpu,comm --sort=-pcpu | head -8 >> $OUT/ab.txt
  pkill -f "env_ab.py background"; ray stop --force >/dev/null 2>&1; sleep 2
done
