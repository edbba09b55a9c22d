# compile-cache key A/B: the screen's run shape vs the loss check's, fresh process each, one shared cache
source .gpu/setup.sh
export PYTHONPATH=/tmp/site:$PWD; export TORCHINDUCTOR_CACHE_DIR=/tmp/cc/inductor TRITON_CACHE_DIR=/tmp/cc/triton
B="--config configs/default.yaml --data .gpu/tinyshakespeare.txt --keys $OUT/keys --set batch_size=32 --set precision=bf16 --set compile=reduce-overhead --set lr_scaling=sqrt"
S="--set max_steps=20 --set log_interval=7 --set eval_tokens=16384"
run(){ T=$(date +%s); python3 bench/compile_cache_key.py "$@" 2>$OUT/err_$2.txt | tail -1 | tee -a $OUT/cachekey.jsonl; echo "  $(( $(date +%s) - T )) s"; }
run --tag cold $B $S
run --tag warm $B $S
run --tag frac $B $S --set gpu_memory_fraction=0.25
run --tag budget $B --set tokens=163840 --set log_interval=100 --set eval_tokens=65536
gzip $OUT/keys/*.log
