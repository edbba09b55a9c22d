# the loss check's exact run (loss_check_0-2 of run G) after the screen's shape filled the cache
source .gpu/setup.sh
export PYTHONPATH=/tmp/site:$PWD; export TORCHINDUCTOR_CACHE_DIR=/tmp/cc/inductor TRITON_CACHE_DIR=/tmp/cc/triton TORCHINDUCTOR_COMPILE_THREADS=3
B="--config .gpu/losscheck.yaml --keys $OUT/keys"
run(){ T=$(date +%s); python3 bench/compile_cache_key.py "$@" 2>$OUT/err_$2.txt | tail -1 | tee -a $OUT/cachekey.jsonl; echo "  $(( $(date +%s) - T )) s"; }
run --tag screen_shape $B --set max_steps=20 --set log_interval=7 --set eval_tokens=16384 --set gpu_memory_fraction=null --set compile_deadline_s=180
run --tag loss_check_exact $B
gzip $OUT/keys/*.log
