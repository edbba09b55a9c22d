# Sourced by the device scripts' inner scripts, from the copy in /tmp/p: the README's command as one labelled
# step of a sitting (its log and exit in /tmp/final/search.log), and what a sitting keeps of a search's OUT.
R=/tmp/final
search() {  # $1: the label, then extra arguments (the README's command is the one without any)
  local L=$1 T=$(date +%s); shift
  echo "START $L $(date -u +%FT%TZ) $(cat gitrev) GPU ${CUDA_VISIBLE_DEVICES:-all} $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) $(nproc) cpus" >> $R/search.log
  python3 -m tuner.search --config configs/default.yaml --data tinyshakespeare.txt "$@" > $R/$L.log 2>&1
  echo "EXIT $L $? after $(( $(date +%s) - T )) s" >> $R/search.log
}
keep() {  # $1: the label, $2: OUT
  mkdir -p $R/$1 && cp $2/summary.json $2/report.md $2/best.yaml $R/$1/ 2>/dev/null
  tar czf $R/$1/trials.tgz -C $2 trials 2>/dev/null
}
