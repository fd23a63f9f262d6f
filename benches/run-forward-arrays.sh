#!/usr/bin/env bash
# benches/run-forward-arrays.sh -- forward-mode derivatives through arrays, native code
# against the evaluator (issue 7): benches/arrays/forward-grad.vlad.
#
# Runs each case REPS times (default 5) natively (`vlad run`, compiled once beforehand and
# cached) and with the evaluator (`vlad run --interp`), and prints the medians and the
# evaluator/native ratio: f(v) (mode 1), a directional derivative by one forward pass (mode 2)
# and the gradient by n forward passes (mode 3).
#
# Usage: benches/run-forward-arrays.sh [VLAD-BINARY]   (default: target/release/vlad)
set -uo pipefail
cd "$(dirname "$0")/.."
VLAD=${1:-target/release/vlad}
REPS=${REPS:-5}
TIMEOUT=${TIMEOUT:-600}
. benches/lib.sh
FILE=benches/arrays/forward-grad.vlad

echo "vlad forward-mode array benchmarks: $VLAD, median of $REPS runs, $(nproc) cores, $(date -u +%Y-%m-%d)"
echo "1 1" | "$VLAD" run "$FILE" >/dev/null # compile once (cached)
for input in "100000 1" "100000 2" "1000 3" "1000000 1" "1000000 2" "3000 3"; do
  RUN_FLAGS= bench "native    n, mode = $input" "$FILE" "$input"; n=$LAST
  case $input in
  1000000*|3000*) ;; # the evaluator takes minutes here
  *)
    RUN_FLAGS=--interp bench "evaluator n, mode = $input" "$FILE" "$input"; e=$LAST
    echo "    evaluator/native = $(ratio "$e" "$n")"
    ;;
  esac
done
