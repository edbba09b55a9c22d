# Issue 36 on one GPU, in one sitting: (1) the short-horizon loss limit's validation on the default model
# (bench/horizon_agreement.py: the baseline at two seeds and 12 configs, each the whole planned run with
# evals at 5/10/20/40% of it, 6 at once); (2) bench/ceiling.py on configs/hybrid-100m.yaml: the plain recipe,
# then bf16 blocks compiled at batch 16/32 with and without checkpointing, one at a time, the fastest
# profiled. Output in /tmp/final; `bash bench/device/poll.sh 540 ALLDONE` waits.
set -u
source bench/device/stage.sh
cat > /tmp/size_inner.sh <<'INNER'
cd /tmp/p
export PYTHONPATH=/tmp/site:/tmp/p PYTHONUNBUFFERED=1 CUDA_VISIBLE_DEVICES=0
R=/tmp/final
step() { echo "$1 $(date -u +%FT%TZ) $(cat gitrev) $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) $(nproc) cpus" >> $R/search.log; }
step START-horizon
python3 bench/horizon_agreement.py --config configs/default.yaml --data tinyshakespeare.txt --jobs 6 \
  --out $R/horizon_agreement.json --work out/horizon > $R/horizon.log 2>&1
echo "EXIT horizon $?" >> $R/search.log
step START-ceiling
python3 bench/ceiling.py --config configs/hybrid-100m.yaml --batches 8 --precisions fp32 --compiles none \
  --scopes model --kernels torch --steps 30 --out out/ceiling-plain > $R/ceiling_plain.log 2>&1
echo "EXIT ceiling-plain $?" >> $R/search.log
python3 bench/ceiling.py --config configs/hybrid-100m.yaml --batches 16,32 --precisions bf16 --compiles default \
  --scopes blocks --checkpointing 0,2 --kernels torch --steps 30 --profile --out out/ceiling-bf16 > $R/ceiling_bf16.log 2>&1
echo "EXIT ceiling-bf16 $?" >> $R/search.log
cp out/ceiling-bf16/profile.txt $R/ 2>/dev/null
echo "ALLDONE $(date -u +%FT%TZ)" >> $R/search.log
INNER
(setsid nohup bash /tmp/size_inner.sh > /tmp/size_driver.log 2>&1 &)
sleep 1; echo started
