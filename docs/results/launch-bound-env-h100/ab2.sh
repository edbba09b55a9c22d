source .gpu/setup.sh >/dev/null
export PYTHONPATH=/tmp/site:$PWD
cp .gpu/tinyshakespeare.txt .
for r in 1 2 3 4 5; do
  unset OMP_NUM_THREADS; python3 bench/launch_env_ab.py plain 2>/dev/null | grep AB | tee -a $OUT/ab2.txt
  OMP_NUM_THREADS=2 python3 bench/launch_env_ab.py plain 2>/dev/null | grep AB | sed 's/plain/plain_omp2/' | tee -a $OUT/ab2.txt
  unset OMP_NUM_THREADS; python3 bench/launch_env_ab.py thread 2>/dev/null | grep AB | sed 's/thread/thread_noomp/' | tee -a $OUT/ab2.txt
done
