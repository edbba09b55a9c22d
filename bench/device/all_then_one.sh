# Issues 20 and 24 on a machine with N GPUs, in one sitting: the README's command exactly, cold, on GPU 0
# alone (CUDA_VISIBLE_DEVICES=0; issue 20's run, first so that a sitting cut short still has it); then, with
# nothing else running, the seed baseline (300 steps) and best.yaml of that search on GPU 0 (issue 20's
# pair), and the seed baseline in a main thread and in a Ray trial (bench/device/baseline_where.py); then,
# where N >= 2, the same command on all N GPUs, cold again (each search compiles into its own
# OUT/compile-cache; the first one's is moved aside). With GPU_TESTS=1, then the GPU tests (at most TESTS_S
# seconds each): over GPUs 1 to 3 where N >= 4, else the whole file on GPU 0 after the rest. Issue 20 alone
# on one H200: `GPU_TESTS=1 TESTS_S=720`, about 22 minutes held (the tests take 379 + 2 x 90 s on H100s).
# Leave the tests out where model/ and trainables/ are unchanged since they last passed. On 4x H200
# all-then-one runs with the ceiling sweep beside; a pair run beside the tests and the Hugging Face
# example loses its CPUs to their compiles (docs/benchmarks.md).
# Output in /tmp/final (one folder per search); `bash bench/device/poll.sh 540 ALLDONE` waits.
set -u
R=/tmp/final; mkdir -p $R
# the working tree as copied here (a clean checkout of the commit in .gpu/gitrev), less docs/ and .gpu/
rm -rf /tmp/p && mkdir /tmp/p && tar cf - --exclude=./docs --exclude=./.gpu . | tar xf - -C /tmp/p
cp .gpu/tinyshakespeare.txt .gpu/gitrev /tmp/p/
cat > /tmp/all_inner.sh <<'INNER'
cd /tmp/p
export PYTHONPATH=/tmp/site:/tmp/p PYTHONUNBUFFERED=1
R=/tmp/final
N=$(nvidia-smi -L | wc -l)
lscpu > $R/lscpu.txt 2>&1  # the baseline is launch-bound: its speed is the host CPU's
TESTS_S=${TESTS_S:-420}
search() {  # $1: the label; the README's command exactly, on the GPUs CUDA_VISIBLE_DEVICES leaves
  local T=$(date +%s)
  echo "START $1 $(date -u +%FT%TZ) $(cat gitrev) $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) x$N $(nproc) cpus CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-all}" >> $R/search.log
  python3 -m tuner.search --config configs/default.yaml --data tinyshakespeare.txt > $R/$1.log 2>&1
  echo "EXIT $1 $? after $(( $(date +%s) - T )) s" >> $R/search.log
  mkdir -p $R/$1 && cp out/search/summary.json out/search/report.md out/search/report.html out/search/best.yaml $R/$1/
  cp -r out/search/trials $R/$1/ 2>/dev/null  # the rows, loss runs ahead among them
}
TR="python3 -m trainables.train --data tinyshakespeare.txt --json"
gpu_tests() {  # $1: the GPU, $2: the label, then the test selection
  local G=$1 L=$2; shift 2
  CUDA_VISIBLE_DEVICES=$G timeout $TESTS_S python3 -m pytest -v -m gpu -p no:cacheprovider "$@" > $R/gpu_tests_$L.log 2>&1
  echo "GPUTESTS $L exit $? $(date -u +%FT%TZ)" >> $R/search.log
}
export CUDA_VISIBLE_DEVICES=0
search one
# the pair alone, right after (nothing else runs on the machine); best.yaml's run reads the caches it names
$TR --config configs/default.yaml --set max_steps=300 > $R/one/train_baseline.json 2> $R/one/train_baseline.err
$TR --config out/search/best.yaml > $R/one/train_best.json 2> $R/one/train_best.err
echo "PAIR $(date -u +%FT%TZ)" >> $R/search.log
# still alone: where the launch-bound baseline runs slower
python3 bench/device/baseline_where.py --data tinyshakespeare.txt --rounds 1 --steps 150 --spinners '' > $R/one/baseline_where.jsonl 2> $R/one/baseline_where.err
echo "WHERE $(date -u +%FT%TZ)" >> $R/search.log
F=tests/test_fused_gpu.py
if [ $N -ge 2 ]; then
  mv out/search out/search-one
  unset CUDA_VISIBLE_DEVICES
  search all
fi
if [ "${GPU_TESTS:-0}" = 1 ] && [ $N -ge 4 ]; then  # each compiled-model test (cold autotuning) on a GPU of its own
  gpu_tests 1 ops $F -k "not model_matches" &
  gpu_tests 2 model0 $F -k "model_matches and dtype0" &
  gpu_tests 3 model1 $F -k "model_matches and dtype1" &
elif [ "${GPU_TESTS:-0}" = 1 ]; then  # one GPU (issue 20 on an H200): the whole file after the rest
  gpu_tests 0 all $F
fi
wait
echo "ALLDONE $(date -u +%FT%TZ)" >> $R/search.log
INNER
(setsid nohup bash /tmp/all_inner.sh > /tmp/all_driver.log 2>&1 &)
sleep 1; echo started
