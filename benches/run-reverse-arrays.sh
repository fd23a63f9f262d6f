#!/usr/bin/env bash
# benches/run-reverse-arrays.sh -- reverse-mode derivatives through arrays, native code
# against the evaluator (issue 7): the gradients of benches/arrays/log-sum-exp.vlad and
# benches/arrays/sum-squares.vlad (one reverse sweep through n reads by `get`), and the four
# array examples.
#
# Runs each case REPS times (default 5) natively (`vlad run`, compiled once beforehand and
# cached) and with the evaluator (`vlad run --interp`), and prints the medians and the
# evaluator/native ratio. The evaluator is left out at n = 10^6 (about 40 s a run).
#
# Usage: benches/run-reverse-arrays.sh [VLAD-BINARY]   (default: target/release/vlad)
set -uo pipefail
cd "$(dirname "$0")/.."
VLAD=${1:-target/release/vlad}
REPS=${REPS:-5}
TIMEOUT=${TIMEOUT:-600}
. benches/lib.sh

echo "vlad reverse-mode array benchmarks: $VLAD, median of $REPS runs, $(nproc) cores, $(date -u +%Y-%m-%d)"
for prog in log-sum-exp sum-squares; do
  FILE=benches/arrays/$prog.vlad
  echo "1 1" | "$VLAD" run "$FILE" >/dev/null # compile once (cached)
  for input in "10000 2" "100000 2" "1000000 1" "1000000 2"; do
    RUN_FLAGS= bench "native    $prog n, mode = $input" "$FILE" "$input"; n=$LAST
    case $input in
    1000000*) ;;
    *)
      RUN_FLAGS=--interp bench "evaluator $prog n, mode = $input" "$FILE" "$input"; e=$LAST
      echo "    evaluator/native = $(ratio "$e" "$n")"
      ;;
    esac
  done
done
for ex in array-calculus log-sum-exp nnmf bundle-adjustment; do
  FILE=examples/$ex.vlad
  "$VLAD" run "$FILE" >/dev/null # compile once (cached)
  RUN_FLAGS= bench "native    examples/$ex" "$FILE" ""; n=$LAST
  RUN_FLAGS=--interp bench "evaluator examples/$ex" "$FILE" ""; e=$LAST
  echo "    evaluator/native = $(ratio "$e" "$n")"
done
