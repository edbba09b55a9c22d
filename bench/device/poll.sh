# wait up to $1 seconds for the marker $2 (default ALLDONE) in the final log, packing /tmp/final into $OUT
# every 20 s (the profile's trace.json, large, stays behind); it gives up after 60 s where the sitting has
# written no log yet (a launch that failed: one lease spent 508 s waiting on nothing)
W=${1:-500}
M=${2:-ALLDONE}
pack() { tar czf $OUT/final.tgz -C /tmp --exclude=trace.json final 2>/dev/null; }
for i in $(seq 1 $((W / 10))); do
  grep -q "$M" /tmp/final/search.log 2>/dev/null && break
  if [ $i = 6 ] && [ ! -s /tmp/final/search.log ]; then  # a sitting that has not started in 60 s never will
    echo "no /tmp/final/search.log after 60 s: the sitting did not start; its drivers' output:"
    tail -20 /tmp/*_driver.log /tmp/*_inner.out 2>/dev/null | cut -c1-300
    exit 3
  fi
  [ $((i % 2)) = 0 ] && pack
  sleep 10
done
tail -8 /tmp/final/search.log | cut -c1-250
LATEST=$(ls -t /tmp/final/*.log 2>/dev/null | grep -v search.log | head -1)
[ -n "$LATEST" ] && { echo "== $LATEST"; tail -4 "$LATEST" | cut -c1-400; }
pack
