#!/bin/bash
# benches/run-first.sh -- what a first `vlad run` of a program costs against `vlad run --interp`
# (issue 23): CPU time (user + system, the C compiler's included) and wall-clock time, medians
# of REPS runs, each first run with an empty cache; then a second run (cache filled); and the
# peak memory of the first run. OLD=path/to/an/older/vlad adds its first runs (one each: they
# take minutes). Usage:
#   benches/run-first.sh [VLAD]          # VLAD defaults to target/release/vlad; REPS=3 TIMEOUT=900
set -u
cd "$(dirname "$0")/.."
VLAD=${1:-target/release/vlad}
REPS=${REPS:-3}
TIMEOUT=${TIMEOUT:-900}
OLD=${OLD:-}
PROGRAMS=${PROGRAMS:-"benches/first-run/reverse-tower-5.vlad benches/first-run/reverse-tower-6.vlad
  benches/first-run/reverse-tower-8.vlad benches/first-run/taylor-6.vlad
  benches/first-run/taylor-7.vlad examples/factorial.vlad examples/saddle-FF.vlad
  examples/saddle-RF.vlad examples/nnmf.vlad examples/array-calculus.vlad"}
source benches/lib.sh
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

# one VLAD CACHE ARGS...: runs once; sets WALL, CPU, RSS (KB) and NOTE (what stderr said).
one() {
  local vlad=$1 cache=$2
  shift 2
  VLAD_CACHE_DIR=$cache /usr/bin/time -f "%e %U %S %M" -o "$scratch/time" \
    timeout "$TIMEOUT" "$vlad" run "$@" < /dev/null > /dev/null 2> "$scratch/err"
  local rc=$?
  read -r WALL user sys RSS < <(tail -1 "$scratch/time")
  CPU=$(printf '%.2f' "$(echo "$user + $sys" | bc -l)")
  local err
  err=$(grep "not compiled to native code" "$scratch/err" | head -1)
  case "$err" in
    "") NOTE=native ;;
    *"ran out of time"*) NOTE="evaluator: analysis out of time" ;;
    *"ran out of memory"*) NOTE="evaluator: analysis out of memory" ;;
    *"compiling it would take about"*)
      NOTE="evaluator: predicted $(echo "$err" | sed 's/.*would take about \([0-9.]*\) s.*/\1/') s" ;;
    *) NOTE="evaluator: $(echo "$err" | cut -c36-100)" ;;
  esac
  if [ $rc -ne 0 ]; then NOTE="FAILED (exit $rc): $(head -1 "$scratch/err")"; fi
}

# medians VLAD FRESH ARGS...: REPS runs (FRESH=1: each with an empty cache); sets MW, MC.
medians() {
  local vlad=$1 fresh=$2 walls=() cpus=() cache="$scratch/cache"
  shift 2
  for ((r = 0; r < REPS; r++)); do
    if [ "$fresh" = 1 ]; then rm -rf "$cache"; mkdir -p "$cache"; fi
    one "$vlad" "$cache" "$@"
    walls+=("$WALL")
    cpus+=("$CPU")
  done
  MW=$(printf '%s\n' "${walls[@]}" | median)
  MC=$(printf '%s\n' "${cpus[@]}" | median)
}

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '| program | --interp CPU / wall | first run CPU / wall | first run | peak MB | second run CPU / wall |%s\n' \
  "${OLD:+ before (one run) CPU / wall, peak MB, what it did |}"
printf '| --- | --- | --- | --- | --- | --- |%s\n' "${OLD:+ --- |}"
for p in $PROGRAMS; do
  name=$(basename "$p" .vlad)
  medians "$VLAD" 0 --interp "$p"
  interp="$MC / $MW"
  medians "$VLAD" 1 "$p"
  first="$MC / $MW"
  note=$NOTE
  rss=$((RSS / 1000))
  medians "$VLAD" 0 "$p"
  second="$MC / $MW"
  old=""
  if [ -n "$OLD" ]; then
    rm -rf "$scratch/old"
    mkdir -p "$scratch/old"
    one "$OLD" "$scratch/old" "$p"
    old=" $CPU / $WALL, $((RSS / 1000)), $NOTE |"
  fi
  printf '| %s | %s | %s | %s | %s | %s |%s\n' "$name" "$interp" "$first" "$note" "$rss" "$second" "$old"
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
