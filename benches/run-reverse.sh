#!/usr/bin/env bash
# benches/run-reverse.sh -- reverse-mode complexity benchmarks (issue 4).
#
# Runs each benchmark REPS times (default 5) with the evaluator and prints the
# median wall-clock time, then the ratios the issue asks about:
#   (a) reverse-sharing.vlad: the gradient of x_i = x_{i-1} + x_{i-1}, i = 1..n,
#       must cost O(n): the time ratio n = 2000 vs 1000 (and 2*10^5 vs 10^5,
#       where start-up no longer dominates) should be about 2, not 2^1000;
#   (b) reverse-sum-squares.vlad: the gradient of the sum of squares of n =
#       10^5 list elements against the primal evaluation alone, both with the
#       list construction (mode 0) subtracted and without; and, for scale,
#       one forward-mode pass over the list (mode 3) at n = 2000 and 4000;
#   (c) reverse-loop.vlad: a reverse-mode derivative through a loop of 10^6
#       steps must finish (no native stack overflow).
#
# Usage: benches/run-reverse.sh [VLAD-BINARY]   (default: target/release/vlad)
#        REPS=3 benches/run-reverse.sh
set -uo pipefail
cd "$(dirname "$0")/.."
VLAD=${1:-target/release/vlad}
REPS=${REPS:-5}
TIMEOUT=${TIMEOUT:-600}

. benches/lib.sh

echo "vlad reverse-mode benchmarks: $VLAD, median of $REPS runs, $(nproc) cores, $(date -u +%Y-%m-%d)"
echo
echo "(a) sharing chain x_i = x_{i-1} + x_{i-1}, gradient by derivative-R"
bench "sharing n=1000" benches/reverse-sharing.vlad 1000;     a1=$LAST
bench "sharing n=2000" benches/reverse-sharing.vlad 2000;     a2=$LAST
bench "sharing n=100000" benches/reverse-sharing.vlad 100000; a3=$LAST
bench "sharing n=200000" benches/reverse-sharing.vlad 200000; a4=$LAST
echo "    ratio t(2000)/t(1000)     = $(ratio "$a2" "$a1")"
echo "    ratio t(200000)/t(100000) = $(ratio "$a4" "$a3")"
echo
echo "(b) sum of squares of n = 100000 list elements"
bench "build the list only (mode 0)" benches/reverse-sum-squares.vlad "100000 0"; b0=$LAST
bench "primal f(l) (mode 1)" benches/reverse-sum-squares.vlad "100000 1";         b1=$LAST
bench "f(l) and gradient-R (mode 2)" benches/reverse-sum-squares.vlad "100000 2"; b2=$LAST
echo "    ratio gradient/primal, whole runs          = $(ratio "$b2" "$b1")"
if [ "$b0" != nan ] && [ "$b1" != nan ] && [ "$b2" != nan ]; then
  echo "    ratio gradient/primal, list build removed  = $(ratio "$(echo "$b2 - $b0" | bc -l)" "$(echo "$b1 - $b0" | bc -l)")"
fi
echo "    for scale: one forward-mode pass (mode 3, a directional derivative) at small n"
bench "forward pass n=2000 (mode 3)" benches/reverse-sum-squares.vlad "2000 3";   f1=$LAST
bench "forward pass n=4000 (mode 3)" benches/reverse-sum-squares.vlad "4000 3";   f2=$LAST
echo "    ratio t(4000)/t(2000) = $(ratio "$f2" "$f1")"
echo
echo "(c) derivative-R through a loop"
bench "loop n=100000" benches/reverse-loop.vlad 100000;   c1=$LAST
bench "loop n=1000000" benches/reverse-loop.vlad 1000000; c2=$LAST
echo "    ratio t(10^6)/t(10^5) = $(ratio "$c2" "$c1")"
