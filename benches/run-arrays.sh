#!/usr/bin/env bash
# benches/run-arrays.sh -- array reverse-mode complexity benchmarks (issue 5).
#
# Runs each benchmark REPS times (default 5) with the evaluator and prints the median
# wall-clock time and the ratios: the reverse-mode gradient of log-sum-exp and of a sum of
# squares read by `get` (each element twice) at n = 10^4, 10^5, 10^6 must scale linearly (the
# ratios t(10n)/t(n) about 10), and the gradient/primal ratio at each n.
#
# Usage: benches/run-arrays.sh [VLAD-BINARY]   (default: target/release/vlad)
#        REPS=3 SIZES="10000 100000" benches/run-arrays.sh
set -uo pipefail
cd "$(dirname "$0")/.."
VLAD=${1:-target/release/vlad}
REPS=${REPS:-5}
TIMEOUT=${TIMEOUT:-600}
SIZES=${SIZES:-10000 100000 1000000}
. benches/lib.sh

echo "vlad array benchmarks: $VLAD, median of $REPS runs, $(nproc) cores, $(date -u +%Y-%m-%d)"
for prog in log-sum-exp sum-squares; do
  echo
  echo "$prog (benches/arrays/$prog.vlad)"
  prev=""
  for n in $SIZES; do
    bench "$prog n=$n primal (mode 1)" "benches/arrays/$prog.vlad" "$n 1"; p=$LAST
    bench "$prog n=$n gradient (mode 2)" "benches/arrays/$prog.vlad" "$n 2"; g=$LAST
    echo "    gradient/primal = $(ratio "$g" "$p")"
    if [ -n "$prev" ]; then echo "    gradient t($n)/t(previous n) = $(ratio "$g" "$prev")"; fi
    prev=$g
  done
done
