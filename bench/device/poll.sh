# wait up to $1 seconds for ALLDONE in the final log, packing what exists into $OUT every 20 s
W=${1:-500}
for i in $(seq 1 $((W / 10))); do
  grep -q ALLDONE /tmp/final/search.log 2>/dev/null && break
  [ $((i % 2)) = 0 ] && tar czf $OUT/final.tgz -C /tmp final 2>/dev/null
  sleep 10
done
tail -6 /tmp/final/search.log | cut -c1-250
tar czf $OUT/final.tgz -C /tmp final 2>/dev/null
