# wait up to $1 seconds for the marker $2 (default ALLDONE) in the final log, packing /tmp/final into $OUT
# every 20 s (the profile's trace.json, large, stays behind)
W=${1:-500}
M=${2:-ALLDONE}
pack() { tar czf $OUT/final.tgz -C /tmp --exclude=trace.json final 2>/dev/null; }
for i in $(seq 1 $((W / 10))); do
  grep -q "$M" /tmp/final/search.log 2>/dev/null && break
  [ $((i % 2)) = 0 ] && pack
  sleep 10
done
tail -8 /tmp/final/search.log | cut -c1-250
LATEST=$(ls -t /tmp/final/*.log 2>/dev/null | grep -v search.log | head -1)
[ -n "$LATEST" ] && { echo "== $LATEST"; tail -4 "$LATEST" | cut -c1-400; }
pack
