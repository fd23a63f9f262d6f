#!/usr/bin/env bash
# benches/compare-compilers.sh -- two builds of vlad side by side (issue 20: the backend on the
# typed IR against the one that printed C directly): compile time, size of the C, and running
# time of the same programs on the same inputs.
#
# For each case: `vlad compile FILE -o EXE` with each binary, interleaved (fresh cache,
# COMPILE_REPS times each and the median), the size of `--emit c`, then the two executables run
# interleaved (old, new, old, new, ...) REPS times each on the case's input; prints the medians
# of CPU seconds,
# the ratios new/old, and whether the outputs are byte-identical, as a Markdown table.
# Both compile with -I lib (builds before the library was built in need it).
#
# Usage: benches/compare-compilers.sh OLD_VLAD NEW_VLAD
# Environment:
#   REPS          timed runs of each executable (default 7)
#   COMPILE_REPS  timed compiles with each binary (default 3)
#   CASES         "file|input ..." (default: the saddle/particle variants at N=200, and the
#                 array benchmarks)
set -uo pipefail
cd "$(dirname "$0")/.."
OLD=${1:?usage: compare-compilers.sh OLD_VLAD NEW_VLAD}
NEW=${2:?usage: compare-compilers.sh OLD_VLAD NEW_VLAD}
REPS=${REPS:-7}
COMPILE_REPS=${COMPILE_REPS:-3}
TIMEOUT=${TIMEOUT:-600}
. benches/lib.sh
DEFAULT_CASES=""
for v in saddle-FF saddle-FR saddle-RF saddle-RR particle-FF particle-FR particle-RF particle-RR; do
  DEFAULT_CASES+="benches/saddle-particle/$v.vlad|200 "
done
DEFAULT_CASES+="benches/arrays/log-sum-exp.vlad|1000000_1 benches/arrays/log-sum-exp.vlad|100000_2 "
DEFAULT_CASES+="benches/arrays/sum-squares.vlad|100000_2 benches/arrays/state-loop.vlad|100000_300_0 "
DEFAULT_CASES+="benches/arrays/state-loop.vlad|100000_300_1 benches/arrays/forward-grad.vlad|1000000_2 "
DEFAULT_CASES+="benches/reverse-loop.vlad|1000000"
CASES=${CASES:-$DEFAULT_CASES}

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# seconds VAR CMD...: runs CMD (stdin from $INPUT), sets VAR to the CPU seconds it took (user +
# system, its children included: the C compiler), or nan. CPU time, not the clock: the machine
# these figures come from is shared, and a loaded machine stretches wall time far more.
seconds() {
  local var=$1 rc
  shift
  echo "$INPUT" | /usr/bin/time -f '%U %S' -o "$WORK/time" timeout "$TIMEOUT" "$@" \
    >"$WORK/out" 2>"$WORK/err"
  rc=$?
  if [ $rc -ne 0 ]; then
    echo "  FAILED (exit $rc): $* : $(head -3 "$WORK/err" | tr '\n' ' ')" >&2
    printf -v "$var" nan
  else
    printf -v "$var" '%s' "$(tail -1 "$WORK/time" | awk '{ print $1 + $2 }')"
  fi
}

echo "old: $OLD; new: $NEW; CPU seconds, median of $REPS interleaved runs (compile: of $COMPILE_REPS);" \
     "$(nproc) cores, $(uname -m), $(date -u '+%Y-%m-%d %H:%M UTC')"
echo
echo "| program | input | compile old s | compile new s | new/old | C old KB | C new KB | run old s | run new s | new/old | same output |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
n=0
for case in $CASES; do
  file=${case%%|*}
  INPUT=$(echo "${case#*|}" | tr '_' ' ')
  n=$((n + 1))
  old_compiles=(); new_compiles=()
  for ((r = 0; r < COMPILE_REPS; r++)); do
    for which in old new; do
      bin=$OLD; [ $which = new ] && bin=$NEW
      INPUT="" seconds t env VLAD_CACHE_DIR="$WORK/cache-$which-$n-$r" "$bin" compile "$file" \
        -I lib -o "$WORK/$which-$n.exe"
      if [ $which = old ]; then old_compiles+=("$t"); else new_compiles+=("$t"); fi
    done
  done
  compile_old=$(printf '%s\n' "${old_compiles[@]}" | median)
  compile_new=$(printf '%s\n' "${new_compiles[@]}" | median)
  for which in old new; do
    bin=$OLD; [ $which = new ] && bin=$NEW
    kb=$(VLAD_CACHE_DIR="$WORK/cache-c" "$bin" compile "$file" -I lib --emit c 2>/dev/null | wc -c)
    printf -v "c_$which" '%s' "$((kb / 1000))"
  done
  old_times=(); new_times=(); same=yes
  for ((r = 0; r < REPS; r++)); do
    seconds t "$WORK/old-$n.exe"; old_times+=("$t"); cp "$WORK/out" "$WORK/out-old"
    seconds t "$WORK/new-$n.exe"; new_times+=("$t")
    cmp -s "$WORK/out" "$WORK/out-old" || same=NO
  done
  run_old=$(printf '%s\n' "${old_times[@]}" | median)
  run_new=$(printf '%s\n' "${new_times[@]}" | median)
  printf '| %s | %s | %.2f | %.2f | %s | %s | %s | %.3f | %.3f | %s | %s |\n' \
    "$(basename "$file" .vlad)" "$INPUT" "$compile_old" "$compile_new" \
    "$(ratio2 "$compile_new" "$compile_old")" "$c_old" "$c_new" "$run_old" "$run_new" \
    "$(ratio2 "$run_new" "$run_old")" "$same"
done
