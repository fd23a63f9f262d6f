#!/usr/bin/env bash
# benches/run-carry-boxed.sh -- loops that carry boxed values (benches/carry-boxed.vlad), two
# builds of vlad side by side: each compiles the program once (`vlad compile -o`), then the two
# executables run interleaved (old, new, old, new, ...) REPS times on each case's input.
# Prints, per case, the medians of CPU seconds (user + system) and of peak RSS, the ratios
# new/old, the arena's size at exit (VLAD_ARENA_STATS) and whether the outputs agree, as a
# Markdown table.
#
# Usage: benches/run-carry-boxed.sh OLD_VLAD NEW_VLAD
# Environment:
#   REPS   timed runs of each executable (default 5)
#   CASES  "mode_size ..." (default: every mode of carry-boxed.vlad at a size where the old
#          build's arena grows by 100 MB or more)
set -uo pipefail
cd "$(dirname "$0")/.."
OLD=${1:?usage: run-carry-boxed.sh OLD_VLAD NEW_VLAD}
NEW=${2:?usage: run-carry-boxed.sh OLD_VLAD NEW_VLAD}
REPS=${REPS:-5}
TIMEOUT=${TIMEOUT:-600}
. benches/lib.sh
CASES=${CASES:-"0_3000000 1_20000 2_3000000 3_3000000 4_10000000 5_1000 5_10000"}
FILE=benches/carry-boxed.vlad

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
for which in old new; do
  bin=$OLD; [ $which = new ] && bin=$NEW
  VLAD_CACHE_DIR="$WORK/cache-$which" "$bin" compile "$FILE" -o "$WORK/$which.exe" ||
    { echo "$which: cannot compile $FILE" >&2; exit 1; }
done

# run WHICH: runs WHICH.exe on $INPUT; appends its CPU seconds and peak RSS (MB) to the arrays
# WHICH_t and WHICH_m, keeps its output and the arena's size.
run() {
  local which=$1 rc
  echo "$INPUT" | VLAD_ARENA_STATS=1 /usr/bin/time -f '%U %S %M' -o "$WORK/time" \
    timeout "$TIMEOUT" "$WORK/$which.exe" >"$WORK/out-$which" 2>"$WORK/err-$which"
  rc=$?
  if [ $rc -ne 0 ]; then
    echo "  FAILED (exit $rc): $which $INPUT: $(head -3 "$WORK/err-$which" | tr '\n' ' ')" >&2
    eval "${which}_t+=(nan); ${which}_m+=(nan)"
    return
  fi
  eval "${which}_t+=($(tail -1 "$WORK/time" | awk '{ print $1 + $2 }'))"
  eval "${which}_m+=($(tail -1 "$WORK/time" | awk '{ printf "%.1f", $3 / 1024 }'))"
}
arena() { grep -o 'arena: [0-9]* chunks' "$WORK/err-$1" | awk '{ print $2 * 16 " MB" }'; }

echo "old: $OLD; new: $NEW; median of $REPS interleaved runs;" \
     "$(nproc) cores, $(uname -m), $(date -u '+%Y-%m-%d %H:%M UTC')"
echo
echo "| mode | size | old CPU s | new CPU s | new/old | old peak RSS MB | new peak RSS MB | old arena | new arena | same output |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
for case in $CASES; do
  INPUT=$(echo "$case" | tr '_' ' ')
  old_t=(); new_t=(); old_m=(); new_m=(); same=yes
  for ((r = 0; r < REPS; r++)); do
    run old
    run new
    cmp -s "$WORK/out-old" "$WORK/out-new" || same=NO
  done
  to=$(printf '%s\n' "${old_t[@]}" | median); tn=$(printf '%s\n' "${new_t[@]}" | median)
  mo=$(printf '%s\n' "${old_m[@]}" | median); mn=$(printf '%s\n' "${new_m[@]}" | median)
  printf '| %s | %s | %.2f | %.2f | %s | %s | %s | %s | %s | %s |\n' "${case%%_*}" "${case#*_}" \
    "$to" "$tn" "$(ratio2 "$tn" "$to")" "$mo" "$mn" "$(arena old)" "$(arena new)" "$same"
done
