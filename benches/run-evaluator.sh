#!/usr/bin/env bash
# Times the evaluator benchmarks (issue 2) and the forward-mode examples (issue 3): the median
# of N runs (default 5) of `vlad run`, release build, plus peak memory of the last run.
# Usage: benches/run-evaluator.sh [N]
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-5}
cargo build --release --quiet
vlad=target/release/vlad
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
printf '| program | median wall s | peak RSS MiB |\n| --- | --- | --- |\n'
for prog in benches/evaluator/fib.vlad benches/evaluator/loop.vlad benches/evaluator/deep.vlad \
            examples/saddle-FF.vlad examples/particle-FF.vlad; do
  times=()
  for _ in $(seq "$n"); do
    /usr/bin/time -f '%e %M' -o /tmp/vlad-bench-time "$vlad" run --interp "$prog" > /dev/null
    times+=("$(cut -d' ' -f1 /tmp/vlad-bench-time)")
  done
  med=$(printf '%s\n' "${times[@]}" | median)
  rss=$(awk '{printf "%.0f", $2/1024}' /tmp/vlad-bench-time)
  printf '| %s | %s | %s |\n' "$prog" "$med" "$rss"
done
