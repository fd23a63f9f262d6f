#!/usr/bin/env bash
# benches/farfel/run.sh -- the equilibrium example of paper 000 (issue 25): Listing 1 in Farfel
# (examples/farfel/equilibrium.f) and the VLAD version of Fig. 1
# (examples/farfel/equilibrium.vlad), both compiled natively by vlad, against plain Fortran
# with derivatives written by hand (benches/farfel/equilibrium-hand.f) compiled by gfortran.
#
# Compiles the three once (the two vlad compiles timed, in a fresh cache), then for each N in
# NS runs them REPS times each, interleaved (farfel, vlad, gfortran, farfel, ...), on the
# inputs a0 = 1, b0 = 1, N; prints the median times and their ratios, and checks that the
# three print the same two numbers (relative difference at most 1e-9). gfortran alone is also
# timed at N_HAND (the paper's N = 1000 by default). The times are the programs' CPU time
# (user + system, from /usr/bin/time), which other work on a shared machine disturbs far
# less than wall-clock time; CLOCK=wall times wall-clock instead.
#
# The work grows as N^3 (Newton's method, N steps, at three levels): vlad's programs need
# hours at N = 1000 on this project's machines, so NS defaults to "50 100"; FULL=1 adds 1000.
# The ratios are per innermost step, against gfortran at N_HAND.
#
# Usage: benches/farfel/run.sh       (from anywhere)
# Environment:
#   VLAD      the vlad binary (default target/release/vlad)
#   FC        the Fortran compiler (default gfortran); FFLAGS (default -O3 -march=native)
#   REPS      timed runs of each program at each N (default 5)
#   NS        the sizes (default "50 100"; FULL=1 appends 1000)
#   N_HAND    the size gfortran alone is also timed at (default 1000)
#   TIMEOUT   seconds per run (default 36000)
#   CLOCK     cpu (default) or wall
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
cd "$HERE/../.."
VLAD=${VLAD:-target/release/vlad}
FC=${FC:-gfortran}
FFLAGS=${FFLAGS:-"-O3 -march=native"}
REPS=${REPS:-5}
NS=${NS:-"50 100"}
[ "${FULL:-0}" = 1 ] && NS="$NS 1000"
N_HAND=${N_HAND:-1000}
TIMEOUT=${TIMEOUT:-36000}
CLOCK=${CLOCK:-cpu}

. benches/lib.sh

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
export VLAD_CACHE_DIR=$WORK/cache

# timed INPUT CMD...: runs CMD with INPUT on stdin; sets T (seconds: CPU or wall-clock, see
# CLOCK), OUT (stdout), RC
timed() {
  local input=$1 t0 t1
  shift
  t0=$(date +%s.%N)
  printf '%s\n' "$input" |
    /usr/bin/time -o "$WORK/time" -f '%U %S' timeout "$TIMEOUT" "$@" >"$WORK/out" 2>"$WORK/err"
  RC=$?
  t1=$(date +%s.%N)
  if [ "$CLOCK" = wall ]; then
    T=$(echo "$t1 - $t0" | bc -l)
  else
    T=$(tail -1 "$WORK/time" | awk '{print $1 + $2}')
  fi
  OUT=$(cat "$WORK/out")
}

# The inputs a0 = 1, b0 = 1 and N, one a line: each Fortran READ starts a new line (record).
inputs() { printf '1\n1\n%s' "$1"; }

# The first two numbers a program printed.
numbers() { tr '()' '  ' | tr -s ' \n' '\n\n' | grep -E '^-?[0-9]' | head -2; }

# agree A B: whether two outputs' numbers agree to 1e-9 relative.
agree() {
  paste <(echo "$1" | numbers) <(echo "$2" | numbers) |
    awk 'BEGIN {ok = 1; n = 0}
         {n++; d = $1 - $2; if (d < 0) d = -d; m = ($1 < 0 ? -$1 : $1); if (d > 1e-9 * m) ok = 0}
         END {exit !(ok && n == 2)}'
}

echo "equilibrium (paper 000, Listing 1): $VLAD, $FC $FFLAGS, median $CLOCK time of $REPS runs, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%Y-%m-%d)"
for program in farfel:examples/farfel/equilibrium.f vlad:examples/farfel/equilibrium.vlad; do
  name=${program%%:*}
  file=${program#*:}
  t0=$(date +%s.%N)
  if ! "$VLAD" compile "$file" -o "$WORK/$name" 2>"$WORK/err"; then
    echo "run.sh: vlad cannot compile $file: $(head -3 "$WORK/err")" >&2
    exit 1
  fi
  t1=$(date +%s.%N)
  printf 'vlad compile %-34s %6.2f s, %s KB of C\n' "$file" "$(echo "$t1 - $t0" | bc -l)" \
    "$("$VLAD" compile "$file" --emit c | wc -c | awk '{printf "%d", $1 / 1000}')"
done
if ! $FC $FFLAGS -o "$WORK/hand" benches/farfel/equilibrium-hand.f 2>"$WORK/err"; then
  echo "run.sh: $FC cannot compile benches/farfel/equilibrium-hand.f: $(head -3 "$WORK/err")" >&2
  exit 1
fi
# per_step T N: nanoseconds per innermost step (T / N^3).
per_step() { echo "$1 $2" | awk '{printf "%.1f", $1 / ($2 * $2 * $2) * 1e9}'; }
# quotient A B: A / B, or n/a.
quotient() { echo "$1 $2" | awk '{if ($2 > 0) printf "%.1f", $1 / $2; else printf "n/a"}'; }

th=()
for ((r = 0; r < REPS; r++)); do
  timed "$(inputs "$N_HAND")" "$WORK/hand"
  th+=("$T")
done
mh_ref=$(printf '%s\n' "${th[@]}" | median)
hand_step=$(per_step "$mh_ref" "$N_HAND")
echo
printf 'gfortran alone, N = %s: %.3f s, %s ns per innermost step (median of %s); prints %s\n' \
  "$N_HAND" "$mh_ref" "$hand_step" "$REPS" "$(echo "$OUT" | numbers | tr '\n' ' ')"
echo
echo "Times per run, then per innermost step (t / N^3); the ratios compare the steps with gfortran's at N = $N_HAND."
echo
echo "| N | Farfel (vlad) | VLAD (vlad) | Fortran (gfortran) | Farfel ns/step | VLAD ns/step | Farfel / Fortran | VLAD / Fortran | Farfel / VLAD | outputs |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
for n in $NS; do
  tf=(); tv=(); th=()
  of="" ov="" oh="" failed=""
  for ((r = 0; r < REPS; r++)); do
    timed "$(inputs "$n")" "$WORK/farfel"; [ $RC -eq 0 ] || failed="farfel exit $RC"; tf+=("$T"); of=$OUT
    timed "$(inputs "$n")" "$WORK/vlad"; [ $RC -eq 0 ] || failed="vlad exit $RC"; tv+=("$T"); ov=$OUT
    timed "$(inputs "$n")" "$WORK/hand"; [ $RC -eq 0 ] || failed="gfortran exit $RC"; th+=("$T"); oh=$OUT
  done
  mf=$(printf '%s\n' "${tf[@]}" | median)
  mv=$(printf '%s\n' "${tv[@]}" | median)
  mh=$(printf '%s\n' "${th[@]}" | median)
  check="agree"
  if [ -n "$failed" ]; then
    check="FAILED: $failed"
  elif ! agree "$of" "$oh" || ! agree "$ov" "$oh"; then
    check="DIFFER: $(echo "$of" | numbers | tr '\n' ' ')/ $(echo "$ov" | numbers | tr '\n' ' ')/ $(echo "$oh" | numbers | tr '\n' ' ')"
  fi
  sf=$(per_step "$mf" "$n")
  sv=$(per_step "$mv" "$n")
  printf '| %s | %.2f s | %.2f s | %.3f s | %s | %s | %s | %s | %s | %s |\n' "$n" "$mf" "$mv" "$mh" \
    "$sf" "$sv" "$(quotient "$sf" "$hand_step")" "$(quotient "$sv" "$hand_step")" \
    "$(quotient "$mf" "$mv")" "$check"
done
