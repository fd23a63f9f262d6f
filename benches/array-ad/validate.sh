#!/usr/bin/env bash
# benches/array-ad/validate.sh -- checks the programs of the array-gradient benchmark against
# each other (run.sh checks vlad against C again at the benchmark sizes, at every run):
#   (a) each C baseline's hand-written derivatives against central differences of its own
#       primal (mode 9 of c/*.c), at small sizes;
#   (b) vlad's native code (`vlad compile -o`) against the C baseline, every mode, at medium
#       sizes (two repetitions, so that the points of repetitions 0 and 1 both count);
#   (c) vlad's native code against vlad's evaluator (`vlad run --interp`), every mode, at small
#       sizes.
# Numbers agree when |a - b| <= 1e-8 max(1, |a| + |b|).  Prints one line per check and exits
# 1 if any fails.  crates/vlad-cli/tests/array_ad.rs checks (a), and the evaluator against C
# at the small sizes, in `cargo test`.
#
# Usage: benches/array-ad/validate.sh        (VLAD: the vlad binary, default target/release/vlad;
#                                             PROGRAMS: some of them, default all)
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
cd "$HERE/../.."
VLAD=${VLAD:-target/release/vlad}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
export VLAD_CACHE_DIR=$WORK/cache
MEM_MB=${MEM_MB:-8000}
FAILED=0
PROGRAMS=${PROGRAMS:-"lse micro llsq logreg kmeans gmm ba nnmf"}

fail() { echo "FAILED: $*"; FAILED=1; }
agree() {
  awk -v a="$1" -v b="$2" 'BEGIN {
    na = split(a, x, " "); nb = split(b, y, " ");
    if (na == 0 || na != nb) exit 1
    for (i = 1; i <= na; i++) {
      d = x[i] - y[i]; if (d < 0) d = -d; s = (x[i] < 0 ? -x[i] : x[i]) + (y[i] < 0 ? -y[i] : y[i]);
      if (!(d <= 1e-8 * (s > 1 ? s : 1))) exit 1
    } }'
}
# out CMD... <<< INPUT: the numbers CMD prints (under the memory limit), or "ERROR ..."
out() {
  local input=$1 st
  shift
  st=$(python3 "$HERE/measure.py" 300 "$MEM_MB" "$input" "$WORK/o" -- "$@" | cut -d' ' -f1)
  if [ "$st" = ok ]; then tr -d '()' <"$WORK/o"; else echo "ERROR $st $(head -3 "$WORK/o.err" | tr '\n' ' ')"; fi
}

# chosen P: whether PROGRAMS names P
chosen() { [[ " $PROGRAMS " == *" $1 "* ]]; }

for p in $PROGRAMS; do
  cc -O3 -march=native -ffp-contract=off -o "$WORK/$p.c.exe" "$HERE/c/$p.c" -lm || fail "cc c/$p.c"
  "$VLAD" compile "$HERE/$p.vlad" -o "$WORK/$p.exe" || fail "vlad compile $p.vlad"
done

echo "(a) hand-written derivatives against central differences"
for input in "lse:50" "micro:1 30" "llsq:30 5" "logreg:50 4" "kmeans:40 5 3" "gmm:3 4 20" "gmm:5 3 10" \
             "ba:3 5" "nnmf:1 30 40"; do
  p=${input%%:*}
  chosen "$p" || continue
  if ! echo "${input#*:} 9 0" | "$WORK/$p.c.exe"; then fail "$p ${input#*:}: finite differences"; fi
done

# compare NAME A B
compare() {
  if [[ "$2" == ERROR* ]] || [[ "$3" == ERROR* ]] || ! agree "$2" "$3"; then
    fail "$1: $2 | $3"
  else
    echo "ok  $1: $2"
  fi
}

echo "(b) vlad native code against C"
for c in "lse:10000:1 2 3 5" "lse:300:4" "micro:1 1000:1 2 3 4 5" "micro:2 1000:1 2 3 4 5" \
         "micro:3 300:1 2 3 4 5" "micro:4 300:1 2 3 4 5" "llsq:1000 100:1 2 3" "logreg:1000 5:1 2 3 4" "logreg:200 5:5" \
         "kmeans:1000 16 8:1 2 4" "kmeans:100 16 8:3" "gmm:5 10 200:1 2" "ba:5 50:1 2 3" \
         "nnmf:1 100 120:1 2 3" "nnmf:2 100 120:1 2 3"; do
  IFS=: read -r p args modes <<<"$c"
  chosen "$p" || continue
  for m in $modes; do
    compare "$p $args mode $m (native, C)" "$(out "$args $m 2" "$WORK/$p.exe")" "$(out "$args $m 2" "$WORK/$p.c.exe")"
  done
done

echo "(c) vlad native code against the evaluator"
for c in "lse:20:1 2 3 4 5" "micro:1 7:1 2 3 4 5" "micro:2 7:1 2 3 4 5" "micro:3 7:1 2 3 4 5" \
         "micro:4 7:1 2 3 4 5" "llsq:12 4:1 2 3" "logreg:15 3:1 2 3 4 5" "kmeans:12 3 2:1 2 3 4" \
         "gmm:3 4 10:1 2" "ba:2 3:1 2 3" "nnmf:1 3 4:1 2 3" "nnmf:2 3 4:1 2 3"; do
  IFS=: read -r p args modes <<<"$c"
  chosen "$p" || continue
  for m in $modes; do
    compare "$p $args mode $m (native, evaluator)" "$(out "$args $m 2" "$WORK/$p.exe")" \
      "$(out "$args $m 2" "$VLAD" run --interp "$HERE/$p.vlad")"
  done
done

if [ $FAILED = 0 ]; then echo "all agree"; else echo "some checks FAILED"; fi
exit $FAILED
