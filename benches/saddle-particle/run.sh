#!/usr/bin/env bash
# benches/saddle-particle/run.sh -- the saddle and particle programs in all four mode pairs
# (FF, FR, RF, RR), compiled natively by vlad, against hand-written Rust (baseline/) and
# against vlad's evaluator (issue 7).
#
# For each variant: times `vlad compile FILE -o EXE` once (a fresh cache directory); then runs
# the native program (`vlad run FILE`, already compiled and cached: one untimed warm-up run) and
# the Rust baseline with N repetitions, REPS times each, and the evaluator
# (`vlad run --interp FILE`) with N_EVAL repetitions, EVAL_REPS times; prints the medians per
# repetition and their ratios as a Markdown table.  A variant the compiler cannot handle yet
# (`vlad compile` fails; `vlad run` would print "not compiled to native code ... running in the
# evaluator") is marked "evaluator fallback" and gets no native timing.  The first number each
# program prints is checked: native against Rust (both at N), evaluator against Rust (both at
# N_EVAL); a relative difference above 1e-8 shows in the last column.
#
# Usage: benches/saddle-particle/run.sh       (from anywhere)
# Environment:
#   VLAD        the vlad binary (default target/release/vlad)
#   REPS        timed runs of native and Rust (default 5)
#   N           repetitions per native and Rust run (default 500)
#   N_EVAL      repetitions per evaluator run (default 1)
#   EVAL_REPS   timed evaluator runs (default REPS)
#   EVAL        1 (default): time the evaluator on every variant; fallback: only on the variants
#               that compile natively (the others' fallback runs are evaluator runs anyway); 0: never
#   VARIANTS    default "saddle-FF saddle-FR saddle-RF saddle-RR particle-FF particle-FR particle-RF particle-RR"
#   TIMEOUT     seconds per run (default 600)
#   BASELINE_TARGET  cargo target directory for the baseline (default /tmp/baseline-target)
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
cd "$HERE/../.."
VLAD=${VLAD:-target/release/vlad}
REPS=${REPS:-5}
N=${N:-500}
N_EVAL=${N_EVAL:-1}
EVAL_REPS=${EVAL_REPS:-$REPS}
EVAL=${EVAL:-1}
TIMEOUT=${TIMEOUT:-600}
VARIANTS=${VARIANTS:-"saddle-FF saddle-FR saddle-RF saddle-RR particle-FF particle-FR particle-RF particle-RR"}
BASELINE_TARGET=${BASELINE_TARGET:-/tmp/baseline-target}
BASELINE=$BASELINE_TARGET/release/baseline

. benches/lib.sh

if ! cargo build --release -j1 --quiet --manifest-path "$HERE/baseline/Cargo.toml" \
     --target-dir "$BASELINE_TARGET"; then
  echo "run.sh: cannot build the Rust baseline" >&2
  exit 1
fi

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
export VLAD_CACHE_DIR=$WORK/cache

# timed INPUT CMD...: runs CMD with INPUT on stdin; sets T (seconds), OUT (stdout), ERR, RC
timed() {
  local input=$1 t0 t1
  shift
  t0=$(date +%s.%N)
  echo "$input" | timeout "$TIMEOUT" "$@" >"$WORK/out" 2>"$WORK/err"
  RC=$?
  t1=$(date +%s.%N)
  T=$(echo "$t1 - $t0" | bc -l)
  OUT=$(cat "$WORK/out")
  ERR=$(cat "$WORK/err")
}

# series REPS INPUT CMD...: REPS timed runs; sets MED (median seconds, or nan on failure), OUT
series() {
  local reps=$1 input=$2 times=() r
  shift 2
  MED=nan
  for ((r = 0; r < reps; r++)); do
    timed "$input" "$@"
    if [ $RC -ne 0 ]; then
      echo "  FAILED (exit $RC): $* <<< $input: $(echo "$ERR" | head -3 | tr '\n' ' ')" >&2
      return
    fi
    times+=("$T")
  done
  MED=$(printf '%s\n' "${times[@]}" | median)
}

# per-repetition time in ms, 3 significant digits
per_rep() { if [ "$1" = nan ]; then echo "-"; else awk -v t="$1" -v n="$2" 'BEGIN { printf "%.3g", 1000 * t / n }'; fi; }
# agree A B: "ok" when the first numbers printed agree within 1e-8 relative
agree() {
  awk -v a="$(echo "$1" | head -1)" -v b="$(echo "$2" | head -1)" 'BEGIN {
    d = a - b; if (d < 0) d = -d; m = (a < 0 ? -a : a); if ((b < 0 ? -b : b) > m) m = (b < 0 ? -b : b);
    if (a == "" || b == "") print "no output"; else if (d <= 1e-8 * m) print "ok"; else print "DIFFER (" a " vs " b ")" }'
}

echo "saddle/particle: $VLAD vs Rust baseline vs evaluator; N=$N (native, Rust), N_EVAL=$N_EVAL (evaluator)," \
     "median of $REPS runs ($EVAL_REPS for the evaluator); $(nproc) cores, $(uname -m), $(date -u '+%Y-%m-%d %H:%M UTC')"
ROWS=()
for v in $VARIANTS; do
  file=benches/saddle-particle/$v.vlad
  echo "== $v" >&2
  # compile time (fresh cache: nothing reused)
  timed "" env VLAD_CACHE_DIR="$WORK/compile-cache-$v" "$VLAD" compile "$file" -o "$WORK/$v.exe"
  if [ $RC -eq 0 ]; then
    compile=$(printf '%.2f' "$T"); how=native
  else
    compile="-"; how="evaluator fallback"
    echo "  $(echo "$ERR" | head -1)" >&2
  fi

  nat=nan; nat_out=""
  if [ "$how" = native ]; then
    timed "$N" "$VLAD" run "$file"                # warm-up: compiles into the cache
    series "$REPS" "$N" "$VLAD" run "$file"; nat=$MED; nat_out=$OUT
    if echo "$ERR" | grep -q "not compiled to native code"; then how="evaluator fallback (run)"; fi
    echo "  native: $MED s for N=$N -> $(echo "$OUT" | head -1)" >&2
  fi

  series "$REPS" "$N" "$BASELINE" "$v"; rust=$MED; rust_out=$OUT
  echo "  rust:   $MED s for N=$N -> $(echo "$OUT" | head -1)" >&2

  ev=nan; ev_out=""
  if [ "$EVAL" = 1 ] || { [ "$EVAL" = fallback ] && [ "$how" = native ]; }; then
    series "$EVAL_REPS" "$N_EVAL" "$VLAD" run --interp "$file"; ev=$MED; ev_out=$OUT
    echo "  eval:   $MED s for N_EVAL=$N_EVAL -> $(echo "$OUT" | head -1)" >&2
  fi

  check=""
  if [ -n "$nat_out" ]; then check="native~Rust $(agree "$nat_out" "$rust_out")"; fi
  if [ -n "$ev_out" ]; then
    timed "$N_EVAL" "$BASELINE" "$v"
    check="${check:+$check; }eval~Rust $(agree "$ev_out" "$OUT")"
  fi

  nat_ms=$(per_rep "$nat" "$N"); rust_ms=$(per_rep "$rust" "$N"); ev_ms=$(per_rep "$ev" "$N_EVAL")
  nat_rust="-"; ev_nat="-"; ev_rust="-"
  [ "$nat" != nan ] && [ "$rust" != nan ] && nat_rust=$(ratio2 "$nat_ms" "$rust_ms")
  [ "$nat" != nan ] && [ "$ev" != nan ] && ev_nat=$(ratio2 "$ev_ms" "$nat_ms")
  [ "$ev" != nan ] && [ "$rust" != nan ] && ev_rust=$(ratio2 "$ev_ms" "$rust_ms")
  ROWS+=("| $v | $nat_ms | $rust_ms | $ev_ms | $nat_rust | $ev_nat | $ev_rust | $compile | $how | $check |")
done

echo
echo "Times in ms per repetition (median of runs / repetitions per run)."
echo
echo "| variant | native | Rust | evaluator | native / Rust | evaluator / native | evaluator / Rust | compile s | code | outputs |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
printf '%s\n' "${ROWS[@]}"
