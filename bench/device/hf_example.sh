# Issue 23's Hugging Face example on one GPU: examples/hf_llama/search.yaml at the size its own comment gives
# for a GPU, from the commit in .gpu/src.tar, detached; output in /tmp/final. The machine's image already has
# transformers (5.17.0 there; the example was written against 5.24, and LlamaForCausalLM(LlamaConfig) is the
# same in both), so the usual kernels bundle (Ray, Optuna) is all the call carries, as for the other scripts.
#
# How to call it (device tool, one GPU), carry: [".gpu"]:
#   1. source bench/device/setup.sh && bash bench/device/hf_example.sh && bash bench/device/poll.sh 520 ALLDONE
#   2. if ALLDONE is not there yet, straight after: bash bench/device/poll.sh 540 ALLDONE
set -u
R=/tmp/final; mkdir -p $R
rm -rf /tmp/p && mkdir /tmp/p && tar xf .gpu/src.tar -C /tmp/p && cp .gpu/tinyshakespeare.txt .gpu/gitrev /tmp/p/
cat > /tmp/final_inner.sh <<'INNER'
cd /tmp/p
export PYTHONPATH=/tmp/site:/tmp/p PYTHONUNBUFFERED=1
R=/tmp/final
VERS=$(python3 -c "import torch, transformers, ray, optuna; print('torch', torch.__version__, 'transformers', transformers.__version__, 'ray', ray.__version__, 'optuna', optuna.__version__)" 2>&1 | tail -1)
T=$(date +%s); echo "START $(date -u +%FT%TZ) $(cat gitrev) $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) x$(nvidia-smi -L | wc -l) $(nproc) cpus | $VERS" > $R/search.log
python3 -m tuner.search --config examples/hf_llama/search.yaml --data tinyshakespeare.txt \
  --set train.model.num_hidden_layers=6 --set train.model.hidden_size=384 --set train.model.intermediate_size=1024 \
  --set train.seq_len=256 --set train.tokens=10240000 --out out/hf >> $R/search.log 2>&1
echo "EXIT $? after $(( $(date +%s) - T )) s" >> $R/search.log
cp out/hf/summary.json out/hf/report.md out/hf/best.yaml $R/ 2>/dev/null
echo "ALLDONE $(date -u +%FT%TZ)" >> $R/search.log
INNER
(setsid nohup bash /tmp/final_inner.sh > /tmp/final_driver.log 2>&1 &)
sleep 1; echo started
