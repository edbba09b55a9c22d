# Issues 24 and 20 on a machine with N GPUs (2 or 4), in one sitting: the README's command exactly, cold, on
# GPU 0 alone (CUDA_VISIBLE_DEVICES=0; issue 20's run, first so that a sitting cut short still has it); then
# the same command on all N GPUs, cold again (each search compiles into its own OUT/compile-cache; the first
# one's is moved aside while the second runs, and back after); then, side by side on separate GPUs: the seed
# baseline (300 steps) and best.yaml of the one-GPU search alone on GPU 0; the GPU tests split over GPUs 1
# and 2 (at most TESTS_S seconds); the Hugging Face example's search (issue 23) on GPU 3 (on GPU 0 after the
# pair on 2 GPUs). Run K (4x H200) ran all-then-one, with the ceiling sweep beside.
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
TESTS_S=${TESTS_S:-420}
search() {  # $1: the label; the README's command exactly, on the GPUs CUDA_VISIBLE_DEVICES leaves
  local T=$(date +%s)
  echo "START $1 $(date -u +%FT%TZ) $(cat gitrev) $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) x$N $(nproc) cpus CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-all}" >> $R/search.log
  python3 -m tuner.search --config configs/default.yaml --data tinyshakespeare.txt > $R/$1.log 2>&1
  echo "EXIT $1 $? after $(( $(date +%s) - T )) s" >> $R/search.log
  mkdir -p $R/$1 && cp out/search/summary.json out/search/report.md out/search/report.html out/search/best.yaml $R/$1/
}
export CUDA_VISIBLE_DEVICES=0
search one
mv out/search out/search-one
unset CUDA_VISIBLE_DEVICES
search all
mv out/search out/search-all && mv out/search-one out/search  # best.yaml's run reads the caches it names
TR="python3 -m trainables.train --data tinyshakespeare.txt --json"
hf() {  # issue 23: the Hugging Face example at a GPU size (the image has transformers)
  timeout 360 python3 -m tuner.search --config examples/hf_llama/search.yaml --data tinyshakespeare.txt \
    --set train.model.num_hidden_layers=6 --set train.model.hidden_size=384 \
    --set train.model.intermediate_size=1024 --set train.seq_len=256 --set train.tokens=10240000 \
    --out out/hf > $R/hf.log 2>&1
  echo "HF exit $? $(date -u +%FT%TZ)" >> $R/search.log
  mkdir -p $R/hf && cp out/hf/summary.json out/hf/report.md out/hf/best.yaml $R/hf/
}
gpu_tests() {  # $1: the GPU, $2: the label, then the test selection
  local G=$1 L=$2; shift 2
  CUDA_VISIBLE_DEVICES=$G timeout $TESTS_S python3 -m pytest -v -m gpu -p no:cacheprovider "$@" > $R/gpu_tests_$L.log 2>&1
  echo "GPUTESTS $L exit $? $(date -u +%FT%TZ)" >> $R/search.log
}
( export CUDA_VISIBLE_DEVICES=0
  $TR --config configs/default.yaml --set max_steps=300 > $R/one/train_baseline.json 2> $R/one/train_baseline.err
  $TR --config out/search/best.yaml > $R/one/train_best.json 2> $R/one/train_best.err
  echo "PAIR $(date -u +%FT%TZ)" >> $R/search.log
  [ $N -lt 4 ] && hf ) &
[ $N -ge 4 ] && ( export CUDA_VISIBLE_DEVICES=3; hf ) &
F=tests/test_fused_gpu.py
if [ $N -ge 3 ]; then  # the compiled-model tests (cold fla autotuning, minutes) apart from the rest
  gpu_tests 1 ops $F -k "not model_matches" &
  gpu_tests 2 model $F -k "model_matches" &
else
  gpu_tests 1 all $F &
fi
wait
echo "ALLDONE $(date -u +%FT%TZ)" >> $R/search.log
INNER
(setsid nohup bash /tmp/all_inner.sh > /tmp/all_driver.log 2>&1 &)
sleep 1; echo started
