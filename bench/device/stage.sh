# source me (from the repository root on the device): /tmp/final for the outputs, and /tmp/p, a copy of the
# code to measure with the corpus and the commit's name beside it. .gpu/src, where present, is
# `git archive` of that commit (uncommitted edits stay behind); else the working tree the device got.
R=/tmp/final; mkdir -p $R
SRC=.; [ -d .gpu/src ] && SRC=.gpu/src
rm -rf /tmp/p && mkdir /tmp/p && tar cf - -C $SRC --exclude=./docs --exclude=./.gpu . | tar xf - -C /tmp/p
cp .gpu/tinyshakespeare.txt .gpu/gitrev /tmp/p/
# the loss-horizon validation a report cites (docs/ stays behind, it is large): staged as .gpu/ beside the rest
[ -f .gpu/horizon_agreement.json ] && mkdir -p /tmp/p/docs/results && cp .gpu/horizon_agreement.json /tmp/p/docs/results/
