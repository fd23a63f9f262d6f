#!/usr/bin/env bash
# benches/array-ad/run.sh -- array gradients compiled by vlad against hand-written C (issues 21
# and 22; the table in benches/README.md, "Array gradients against hand-written C").
#
# Builds the C baselines (c/*.c, cc -O3 -march=native -ffp-contract=off, as vlad compiles its
# C), compiles each VLAD program once with `vlad compile FILE -o EXE` (timed, fresh cache; a
# program vlad cannot compile runs through `vlad run`, that is the evaluator, and is marked so),
# then for each problem and size:
#   - times the set-up (reps = 0: the data only) of both, REPS times, interleaved;
#   - for each mode, chooses a repetition count per side so that a run takes about TARGET
#     seconds more than the set-up (one run with reps = 1, more if that was too short to
#     tell), then runs the VLAD executable and the C baseline REPS times, interleaved;
#   - checks that they print the same checksums (relative 1e-8; the C baseline is run once
#     more with vlad's repetition count when the two differ).
# Every run is limited to TIMEOUT seconds and MEM_MB of resident memory (measure.py): a run
# over either is killed and reported as "timeout" or "killed", and the case is not run again.
#
# Times are per repetition: (median run time - median set-up time) / reps, in CPU time (user +
# system) by default since the machine is shared (METRIC=wall for the clock).  Memory is the
# median peak resident memory of the runs (set-up included).  Prints Markdown tables: compile
# times, then one row per case with the ratios of the issues' acceptance criteria.
#
# Usage: benches/array-ad/run.sh            (from anywhere)
# Environment:
#   VLAD      the vlad binary (default target/release/vlad, built if missing)
#   SIZES     full (default; about an hour on an idle 2-core machine) or small (minutes)
#   PROBLEMS  the problems to run (default: lse micro llsq logreg kmeans gmm ba nnmf)
#   MODES     the modes to run (default: all; MODES=1 the primals only)
#   REPS      timed runs per side and case (default 5)
#   TARGET    seconds (CPU) a timed run should take beyond its set-up (default 0.5)
#   TIMEOUT   seconds per run (default 120)
#   MEM_MB    resident memory per run (default 8000)
#   METRIC    cpu (default) or wall
#   WORK      a directory for executables and outputs (default: a fresh temporary one)
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
cd "$HERE/../.."
VLAD=${VLAD:-target/release/vlad}
SIZES=${SIZES:-full}
PROBLEMS=${PROBLEMS:-"lse micro llsq logreg kmeans gmm ba nnmf"}
MODES=${MODES:-"1 2 3 4 5 6 7 8 9"}
REPS=${REPS:-5}
TARGET=${TARGET:-0.5}
TIMEOUT=${TIMEOUT:-120}
MEM_MB=${MEM_MB:-8000}
METRIC=${METRIC:-cpu}
MAX_REPS=10000000
TOL=1e-8
CFLAGS="-O3 -march=native -ffp-contract=off"
if [ -z "${WORK:-}" ]; then
  WORK=$(mktemp -d)
  trap 'rm -rf "$WORK"' EXIT
fi
mkdir -p "$WORK"
export VLAD_CACHE_DIR=$WORK/cache
if [ ! -x "$VLAD" ]; then
  cargo build --release -p vlad-cli || exit 1
fi
log() { echo "$@" >&2; }

# The cases: problem | size arguments (read before the mode) | label | a series name and the
# size that grows along it (the growth column compares a row with the previous row of the same
# problem, series and mode; empty: none) | mode | target | vlad's repetitions (empty:
# calibrated; the C baseline's are always calibrated).  Targets, from the issues' acceptance
# criteria: 22p primal within 1.2x of C; 21g gradient within 4x its own primal and 2x C,
# memory within 3x C + 50 MB; 22f forward mode within 1.5x C and O(n); 21h O(n) (the growth
# column); "-" none.  Each problem and size has a mode 1 (the primal) row, which the ratio to
# the own primal uses.  The O(n) rows run one repetition at every size: the first repetition in
# a process also pays for touching its memory for the first time (system time), so a series
# compares like with like only at the same repetition count.
cases_full() {
  cat <<'EOF'
lse|300|n = 300|n 300|1|-|
lse|300|n = 300|n 300|4|21h|1
lse|1000|n = 1000|n 1000|1|22p|
lse|1000|n = 1000|n 1000|2|21g|
lse|1000|n = 1000|n 1000|3|22f|
lse|1000|n = 1000|n 1000|4|21h|1
lse|1000|n = 1000|n 1000|5|-|
lse|3000|n = 3000|n 3000|1|-|
lse|3000|n = 3000|n 3000|4|21h|1
lse|10000|n = 10000|n 10000|1|22p|
lse|10000|n = 10000|n 10000|2|21g|
lse|10000|n = 10000|n 10000|3|22f|
lse|10000|n = 10000|n 10000|5|-|
lse|100000|n = 100000|n 100000|1|22p|
lse|100000|n = 100000|n 100000|2|21g|
lse|100000|n = 100000|n 100000|3|22f|
lse|100000|n = 100000|n 100000|5|-|
lse|640000|n = 640000|n 640000|1|22p|
lse|640000|n = 640000|n 640000|2|21g|
lse|640000|n = 640000|n 640000|3|22f|
lse|640000|n = 640000|n 640000|5|-|
micro|1 10|dot, n = 10|op1 10|1|-|
micro|1 10|dot, n = 10|op1 10|2|-|
micro|1 10|dot, n = 10|op1 10|3|22f|
micro|1 10|dot, n = 10|op1 10|5|-|
micro|1 1000|dot, n = 1000|op1 1000|1|-|
micro|1 1000|dot, n = 1000|op1 1000|2|-|
micro|1 1000|dot, n = 1000|op1 1000|3|22f|
micro|1 1000|dot, n = 1000|op1 1000|5|-|
micro|1 10000|dot, n = 10000|op1 10000|1|-|
micro|1 10000|dot, n = 10000|op1 10000|3|22f|
micro|1 100000|dot, n = 100000|op1 100000|1|-|
micro|1 100000|dot, n = 100000|op1 100000|2|-|
micro|1 100000|dot, n = 100000|op1 100000|3|22f|
micro|1 100000|dot, n = 100000|op1 100000|5|-|
micro|1 1000000|dot, n = 1000000|op1 1000000|1|-|
micro|1 1000000|dot, n = 1000000|op1 1000000|2|-|
micro|1 1000000|dot, n = 1000000|op1 1000000|3|22f|
micro|1 1000000|dot, n = 1000000|op1 1000000|5|-|
micro|2 10|max, n = 10|op2 10|1|-|
micro|2 10|max, n = 10|op2 10|2|-|
micro|2 10|max, n = 10|op2 10|3|-|
micro|2 1000|max, n = 1000|op2 1000|1|-|
micro|2 1000|max, n = 1000|op2 1000|2|-|
micro|2 1000|max, n = 1000|op2 1000|3|-|
micro|2 10000|max, n = 10000|op2 10000|1|-|
micro|2 10000|max, n = 10000|op2 10000|3|-|
micro|2 100000|max, n = 100000|op2 100000|1|-|
micro|2 100000|max, n = 100000|op2 100000|2|-|
micro|2 100000|max, n = 100000|op2 100000|3|-|
micro|2 1000000|max, n = 1000000|op2 1000000|1|-|
micro|2 1000000|max, n = 1000000|op2 1000000|2|-|
micro|2 1000000|max, n = 1000000|op2 1000000|3|-|
micro|3 10|add, n = 10|op3 10|1|-|
micro|3 10|add, n = 10|op3 10|2|-|
micro|3 10|add, n = 10|op3 10|3|-|
micro|3 10|add, n = 10|op3 10|4|-|
micro|3 10|add, n = 10|op3 10|5|-|
micro|3 1000|add, n = 1000|op3 1000|1|-|
micro|3 1000|add, n = 1000|op3 1000|2|-|
micro|3 1000|add, n = 1000|op3 1000|3|-|
micro|3 1000|add, n = 1000|op3 1000|4|-|
micro|3 1000|add, n = 1000|op3 1000|5|-|
micro|3 100000|add, n = 100000|op3 100000|1|-|
micro|3 100000|add, n = 100000|op3 100000|4|-|
micro|3 100000|add, n = 100000|op3 100000|5|-|
micro|3 1000000|add, n = 1000000|op3 1000000|1|-|
micro|3 1000000|add, n = 1000000|op3 1000000|4|-|
micro|3 1000000|add, n = 1000000|op3 1000000|5|-|
micro|4 10|smul, n = 10|op4 10|1|-|
micro|4 10|smul, n = 10|op4 10|2|-|
micro|4 10|smul, n = 10|op4 10|3|-|
micro|4 10|smul, n = 10|op4 10|4|-|
micro|4 1000|smul, n = 1000|op4 1000|1|-|
micro|4 1000|smul, n = 1000|op4 1000|2|-|
micro|4 1000|smul, n = 1000|op4 1000|3|-|
micro|4 1000|smul, n = 1000|op4 1000|4|-|
micro|4 100000|smul, n = 100000|op4 100000|1|-|
micro|4 100000|smul, n = 100000|op4 100000|3|-|
micro|4 100000|smul, n = 100000|op4 100000|4|-|
micro|4 1000000|smul, n = 1000000|op4 1000000|1|-|
micro|4 1000000|smul, n = 1000000|op4 1000000|3|-|
micro|4 1000000|smul, n = 1000000|op4 1000000|4|-|
llsq|1000 100|1000 x 100|d100 1000|1|22p|
llsq|1000 100|1000 x 100|d100 1000|2|21g|
llsq|1000 100|1000 x 100|d100 1000|3|-|
llsq|10000 100|10000 x 100|d100 10000|1|22p|
llsq|10000 100|10000 x 100|d100 10000|2|21g|
logreg|100 3|n = 100, d = 3|d3 100|1|-|
logreg|100 3|n = 100, d = 3|d3 100|5|21h|1
logreg|300 3|n = 300, d = 3|d3 300|1|-|
logreg|300 3|n = 300, d = 3|d3 300|5|21h|1
logreg|1000 3|n = 1000, d = 3|d3 1000|1|-|
logreg|1000 3|n = 1000, d = 3|d3 1000|5|21h|1
logreg|10000 10|n = 10000, d = 10|d10 10000|1|-|
logreg|10000 10|n = 10000, d = 10|d10 10000|2|21g|
logreg|10000 10|n = 10000, d = 10|d10 10000|4|21g|200
logreg|100000 10|n = 100000, d = 10|d10 100000|1|-|
logreg|100000 10|n = 100000, d = 10|d10 100000|2|21g|
logreg|100000 10|n = 100000, d = 10|d10 100000|3|-|
logreg|100000 10|n = 100000, d = 10|d10 100000|4|21g|10
kmeans|100 16 8|n = 100, k = 16, d = 8|k16-d8 100|1|-|
kmeans|100 16 8|n = 100, k = 16, d = 8|k16-d8 100|3|21h|1
kmeans|300 16 8|n = 300, k = 16, d = 8|k16-d8 300|1|-|
kmeans|300 16 8|n = 300, k = 16, d = 8|k16-d8 300|3|21h|1
kmeans|1000 16 8|n = 1000, k = 16, d = 8|k16-d8 1000|1|22p|
kmeans|1000 16 8|n = 1000, k = 16, d = 8|k16-d8 1000|2|21g|
kmeans|1000 16 8|n = 1000, k = 16, d = 8|k16-d8 1000|4|21g|
kmeans|1000 16 8|n = 1000, k = 16, d = 8|k16-d8 1000|3|21h|1
kmeans|10000 16 8|n = 10000, k = 16, d = 8|k16-d8 10000|1|22p|
kmeans|10000 16 8|n = 10000, k = 16, d = 8|k16-d8 10000|2|21g|
kmeans|10000 16 8|n = 10000, k = 16, d = 8|k16-d8 10000|4|21g|
kmeans|10000 100 20|n = 10000, k = 100, d = 20||1|22p|
kmeans|10000 100 20|n = 10000, k = 100, d = 20||2|21g|
kmeans|10000 100 20|n = 10000, k = 100, d = 20||4|21g|
gmm|2 5 1000|d = 2, k = 5, n = 1000||1|22p|
gmm|2 5 1000|d = 2, k = 5, n = 1000||2|21g|
gmm|10 25 1000|d = 10, k = 25, n = 1000||1|22p|
gmm|10 25 1000|d = 10, k = 25, n = 1000||2|21g|
gmm|20 50 1000|d = 20, k = 50, n = 1000||1|22p|
gmm|20 50 1000|d = 20, k = 50, n = 1000||2|21g|
gmm|64 100 1000|d = 64, k = 100, n = 1000||1|22p|
gmm|64 100 1000|d = 64, k = 100, n = 1000||2|21g|
ba|10 100|p = 1000 (10 cameras x 100 points)|cams10 1000|1|22p|
ba|10 100|p = 1000 (10 cameras x 100 points)|cams10 1000|2|21g|
ba|10 100|p = 1000 (10 cameras x 100 points)|cams10 1000|3|22f|
ba|10 1000|p = 10000 (10 x 1000)|cams10 10000|1|22p|
ba|10 1000|p = 10000 (10 x 1000)|cams10 10000|2|21g|
ba|10 1000|p = 10000 (10 x 1000)|cams10 10000|3|22f|
ba|10 10000|p = 100000 (10 x 10000)|cams10 100000|1|22p|
ba|10 10000|p = 100000 (10 x 10000)|cams10 100000|3|22f|
nnmf|1 10 10|unfused, 10 x 10|f1 100|1|22p|
nnmf|1 10 10|unfused, 10 x 10|f1 100|2|21g|
nnmf|1 10 10|unfused, 10 x 10|f1 100|3|22f|
nnmf|1 100 100|unfused, 100 x 100|f1 10000|1|22p|
nnmf|1 100 100|unfused, 100 x 100|f1 10000|2|21g|
nnmf|1 100 100|unfused, 100 x 100|f1 10000|3|22f|
nnmf|1 1000 1000|unfused, 1000 x 1000|f1 1000000|1|22p|
nnmf|1 1000 1000|unfused, 1000 x 1000|f1 1000000|2|21g|
nnmf|1 1000 1000|unfused, 1000 x 1000|f1 1000000|3|22f|
nnmf|1 3000 3000|unfused, 3000 x 3000|f1 9000000|1|22p|
nnmf|1 3000 3000|unfused, 3000 x 3000|f1 9000000|2|21g|
nnmf|2 10 10|fused, 10 x 10|f2 100|1|22p|
nnmf|2 10 10|fused, 10 x 10|f2 100|2|21g|
nnmf|2 10 10|fused, 10 x 10|f2 100|3|22f|
nnmf|2 100 100|fused, 100 x 100|f2 10000|1|22p|
nnmf|2 100 100|fused, 100 x 100|f2 10000|2|21g|
nnmf|2 100 100|fused, 100 x 100|f2 10000|3|22f|
nnmf|2 1000 1000|fused, 1000 x 1000|f2 1000000|1|22p|
nnmf|2 1000 1000|fused, 1000 x 1000|f2 1000000|2|21g|
nnmf|2 1000 1000|fused, 1000 x 1000|f2 1000000|3|22f|
nnmf|2 3000 3000|fused, 3000 x 3000|f2 9000000|1|22p|
nnmf|2 3000 3000|fused, 3000 x 3000|f2 9000000|2|21g|
EOF
}

cases_small() {
  cat <<'EOF'
lse|1000|n = 1000|n 1000|1|22p|
lse|1000|n = 1000|n 1000|2|21g|
lse|1000|n = 1000|n 1000|3|22f|
lse|1000|n = 1000|n 1000|4|21h|1
lse|1000|n = 1000|n 1000|5|-|
lse|100000|n = 100000|n 100000|1|22p|
lse|100000|n = 100000|n 100000|2|21g|
lse|100000|n = 100000|n 100000|3|22f|
micro|1 1000|dot, n = 1000|op1 1000|1|-|
micro|1 1000|dot, n = 1000|op1 1000|2|-|
micro|1 1000|dot, n = 1000|op1 1000|3|22f|
micro|3 1000|add, n = 1000|op3 1000|1|-|
micro|3 1000|add, n = 1000|op3 1000|4|-|
micro|4 1000|smul, n = 1000|op4 1000|1|-|
micro|4 1000|smul, n = 1000|op4 1000|3|-|
llsq|1000 100|1000 x 100|d100 1000|1|22p|
llsq|1000 100|1000 x 100|d100 1000|2|21g|
logreg|100 3|n = 100, d = 3|d3 100|1|-|
logreg|100 3|n = 100, d = 3|d3 100|5|21h|1
logreg|10000 10|n = 10000, d = 10|d10 10000|1|-|
logreg|10000 10|n = 10000, d = 10|d10 10000|2|21g|
logreg|10000 10|n = 10000, d = 10|d10 10000|4|21g|20
kmeans|100 16 8|n = 100, k = 16, d = 8|k16-d8 100|1|-|
kmeans|100 16 8|n = 100, k = 16, d = 8|k16-d8 100|3|21h|1
kmeans|1000 16 8|n = 1000, k = 16, d = 8|k16-d8 1000|1|22p|
kmeans|1000 16 8|n = 1000, k = 16, d = 8|k16-d8 1000|2|21g|
kmeans|1000 16 8|n = 1000, k = 16, d = 8|k16-d8 1000|4|21g|
gmm|2 5 1000|d = 2, k = 5, n = 1000||1|22p|
gmm|2 5 1000|d = 2, k = 5, n = 1000||2|21g|
ba|10 100|p = 1000 (10 cameras x 100 points)|cams10 1000|1|22p|
ba|10 100|p = 1000 (10 cameras x 100 points)|cams10 1000|2|21g|
ba|10 100|p = 1000 (10 cameras x 100 points)|cams10 1000|3|22f|
nnmf|1 100 100|unfused, 100 x 100|f1 10000|1|22p|
nnmf|1 100 100|unfused, 100 x 100|f1 10000|2|21g|
nnmf|1 100 100|unfused, 100 x 100|f1 10000|3|22f|
nnmf|2 100 100|fused, 100 x 100|f2 10000|1|22p|
nnmf|2 100 100|fused, 100 x 100|f2 10000|2|21g|
nnmf|2 100 100|fused, 100 x 100|f2 10000|3|22f|
EOF
}

mode_name() { # problem mode
  case "$1:$2" in
  *:1) echo "primal" ;;
  lse:2 | llsq:2 | kmeans:2 | logreg:2 | gmm:2 | nnmf:2) echo "gradient, reverse" ;;
  lse:3 | llsq:3 | logreg:3 | nnmf:3) echo "gradient, forward (grad)" ;;
  lse:4) echo "Hv, forward over reverse" ;;
  lse:5) echo "Hv, reverse over forward" ;;
  micro:2) echo "Jacobian, reverse" ;;
  micro:3) echo "Jacobian, forward" ;;
  micro:4) echo "vjp, one reverse sweep" ;;
  micro:5) echo "jvp, one forward pass" ;;
  logreg:4) echo "gradient descent, per step" ;;
  logreg:5) echo "Hessian, forward over reverse" ;;
  kmeans:3) echo "gradient and H 1, forward over reverse" ;;
  kmeans:4) echo "gradient, reverse, points checkpointed" ;;
  ba:2) echo "Jacobian, reverse (jacob-R)" ;;
  ba:3) echo "Jacobian, forward (jacob)" ;;
  *) echo "mode $2" ;;
  esac
}

# --- building ---------------------------------------------------------------------------
declare -A VEXE CEXE HOW COMPILE
log "array-ad: building the C baselines and compiling the VLAD programs in $WORK"
ALL_CASES=$(if [ "$SIZES" = small ]; then cases_small; else cases_full; fi)
for p in $PROBLEMS; do
  if ! echo "$ALL_CASES" | grep -q "^$p|"; then continue; fi
  if ! cc $CFLAGS -o "$WORK/$p.c.exe" "$HERE/c/$p.c" -lm; then
    log "array-ad: cannot build c/$p.c"
    exit 1
  fi
  CEXE[$p]=$WORK/$p.c.exe
  # one compile with an empty cache: the analysis, the C and the C compiler
  read -r st wall user sys peak < <(python3 "$HERE/measure.py" 600 "$MEM_MB" "" "$WORK/compile-$p" -- \
    env VLAD_CACHE_DIR="$WORK/compile-cache-$p" "$VLAD" compile "$HERE/$p.vlad" -o "$WORK/$p.exe")
  if [ "$st" = ok ]; then
    VEXE[$p]=$WORK/$p.exe
    HOW[$p]=native
  else
    VEXE[$p]="$VLAD run $HERE/$p.vlad"
    HOW[$p]="evaluator ($st: $(head -1 "$WORK/compile-$p.err"))"
  fi
  COMPILE[$p]=$(awk -v w="$wall" -v u="$user" -v s="$sys" -v m="$peak" \
    'BEGIN { printf "%.2f | %.2f | %.0f", w, u + s, m }')
  log "  $p: ${HOW[$p]}, compile wall | CPU s | peak MB = ${COMPILE[$p]}"
done

# --- measuring --------------------------------------------------------------------------
# run SIDE PROBLEM INPUT: one run; sets ST, T (seconds by METRIC), MB, OUT
run() {
  local exe
  if [ "$1" = vlad ]; then exe=${VEXE[$2]}; else exe=${CEXE[$2]}; fi
  local wall user sys
  read -r ST wall user sys MB < <(python3 "$HERE/measure.py" "$TIMEOUT" "$MEM_MB" "$3" "$WORK/out" -- $exe)
  if [ "$METRIC" = wall ]; then T=$wall; else T=$(awk -v u="$user" -v s="$sys" 'BEGIN { print u + s }'); fi
  OUT=$(tr -d '()' <"$WORK/out")
}

median() { sort -g | awk '{ a[NR] = $1 } END { if (NR == 0) print "nan"; else if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

# calibrate SIDE PROBLEM ARGS MODE SETUP FIXED: the repetition count of the timed runs; sets
# REPS_OUT and CAL_ST (the status of the last run), and CAL_T/CAL_MB/CAL_OUT when that run
# can count as the first timed run (its repetition count is REPS_OUT).
calibrate() {
  local side=$1 p=$2 args=$3 mode=$4 setup=$5 fixed=$6 reps=1 net
  CAL_T=""
  if [ -n "$fixed" ]; then reps=$fixed; fi
  while :; do
    run "$side" "$p" "$args $mode $reps"
    CAL_ST=$ST
    if [ "$ST" != ok ]; then REPS_OUT=$reps; return; fi
    if [ -n "$fixed" ]; then REPS_OUT=$reps; CAL_T=$T CAL_MB=$MB CAL_OUT=$OUT; return; fi
    net=$(awk -v t="$T" -v s="$setup" 'BEGIN { print t - s }')
    if awk -v n="$net" -v g="$TARGET" 'BEGIN { exit !(n >= g / 2) }'; then
      REPS_OUT=$(awk -v r="$reps" -v n="$net" -v g="$TARGET" 'BEGIN { x = int(r * g / n + 0.5); print x < 1 ? 1 : x }')
      if [ "$REPS_OUT" = "$reps" ]; then CAL_T=$T CAL_MB=$MB CAL_OUT=$OUT; fi
      return
    fi
    if [ "$reps" -ge "$MAX_REPS" ]; then REPS_OUT=$reps; CAL_T=$T CAL_MB=$MB CAL_OUT=$OUT; return; fi
    if awk -v n="$net" -v g="$TARGET" 'BEGIN { exit !(n >= g / 20) }'; then
      REPS_OUT=$(awk -v r="$reps" -v n="$net" -v g="$TARGET" 'BEGIN { print int(r * g / n + 0.5) }')
      return
    fi
    reps=$((reps * 20))
    if [ "$reps" -gt "$MAX_REPS" ]; then reps=$MAX_REPS; fi
  done
}

# agree A B: "ok" when the lists of numbers agree within TOL (|a - b| <= TOL max(1, |a| + |b|))
agree() {
  awk -v a="$1" -v b="$2" -v tol="$TOL" 'BEGIN {
    na = split(a, x, " "); nb = split(b, y, " ");
    if (na == 0 || na != nb) { print "DIFFER (" a " vs " b ")"; exit }
    for (i = 1; i <= na; i++) {
      d = x[i] - y[i]; if (d < 0) d = -d; s = (x[i] < 0 ? -x[i] : x[i]) + (y[i] < 0 ? -y[i] : y[i]);
      if (!(d <= tol * (s > 1 ? s : 1))) { print "DIFFER (" a " vs " b ")"; exit }
    }
    print "ok" }'
}

# Results per case index.
declare -A R_ST R_REPS R_T R_MB R_CHECK SETUP_T
NCASES=0
declare -a C_P C_ARGS C_LABEL C_SCALE C_MODE C_TARGET C_FIXED
while IFS='|' read -r p args label scale mode target fixed; do
  [ -z "$p" ] && continue
  case " $PROBLEMS " in *" $p "*) ;; *) continue ;; esac
  case " $MODES " in *" $mode "*) ;; *) continue ;; esac
  C_P[NCASES]=$p C_ARGS[NCASES]=$args C_LABEL[NCASES]=$label C_SCALE[NCASES]=$scale
  C_MODE[NCASES]=$mode C_TARGET[NCASES]=$target C_FIXED[NCASES]=$fixed
  NCASES=$((NCASES + 1))
done <<<"$ALL_CASES"

log "array-ad: $NCASES cases; REPS=$REPS TARGET=$TARGET s TIMEOUT=$TIMEOUT s MEM_MB=$MEM_MB METRIC=$METRIC"
i=0
while [ $i -lt $NCASES ]; do
  p=${C_P[i]} args=${C_ARGS[i]}
  # the group of cases with this problem and size
  j=$i
  while [ $j -lt $NCASES ] && [ "${C_P[j]}" = "$p" ] && [ "${C_ARGS[j]}" = "$args" ]; do j=$((j + 1)); done
  # the set-up: reps = 0
  declare -a sv=() sc=()
  for ((k = 0; k < REPS; k++)); do
    run vlad "$p" "$args 1 0"; [ "$ST" = ok ] && sv+=("$T")
    run c "$p" "$args 1 0"; [ "$ST" = ok ] && sc+=("$T")
  done
  SETUP_T[vlad,$p,$args]=$(printf '%s\n' "${sv[@]}" | median)
  SETUP_T[c,$p,$args]=$(printf '%s\n' "${sc[@]}" | median)
  log "== $p $args: set-up vlad ${SETUP_T[vlad,$p,$args]} s, C ${SETUP_T[c,$p,$args]} s"
  for ((c = i; c < j; c++)); do
    mode=${C_MODE[c]}
    declare -A tt=() mb=() outv=()
    for side in vlad c; do
      fixed=""; [ "$side" = vlad ] && fixed=${C_FIXED[c]}
      calibrate "$side" "$p" "$args" "$mode" "${SETUP_T[$side,$p,$args]}" "$fixed"
      R_ST[$side,$c]=$CAL_ST
      R_REPS[$side,$c]=$REPS_OUT
      tt[$side]="" mb[$side]="" outv[$side]=""
      if [ -n "$CAL_T" ]; then tt[$side]=$CAL_T mb[$side]=$CAL_MB outv[$side]=$CAL_OUT; fi
    done
    # the timed runs, interleaved (a calibration run at the final count counts as the first)
    for ((k = 0; k < REPS; k++)); do
      for side in vlad c; do
        [ "${R_ST[$side,$c]}" = ok ] || continue
        if [ $k -eq 0 ] && [ -n "${tt[$side]}" ]; then continue; fi
        run "$side" "$p" "$args $mode ${R_REPS[$side,$c]}"
        if [ "$ST" != ok ]; then R_ST[$side,$c]=$ST; continue; fi
        tt[$side]+=" $T" mb[$side]+=" $MB" outv[$side]=$OUT
      done
    done
    for side in vlad c; do
      R_T[$side,$c]=nan R_MB[$side,$c]=nan
      if [ "${R_ST[$side,$c]}" = ok ]; then
        R_T[$side,$c]=$(printf '%s\n' ${tt[$side]} | median)
        R_MB[$side,$c]=$(printf '%s\n' ${mb[$side]} | median)
      fi
    done
    # the checksums, at vlad's repetition count
    R_CHECK[$c]="-"
    if [ "${R_ST[vlad,$c]}" = ok ]; then
      cout=${outv[c]}
      if [ "${R_REPS[c,$c]}" != "${R_REPS[vlad,$c]}" ] || [ "${R_ST[c,$c]}" != ok ]; then
        run c "$p" "$args $mode ${R_REPS[vlad,$c]}"; cout=$OUT
      fi
      R_CHECK[$c]=$(agree "${outv[vlad]}" "$cout")
    fi
    log "  mode $mode: vlad ${R_ST[vlad,$c]} ${R_T[vlad,$c]} s x${R_REPS[vlad,$c]} ${R_MB[vlad,$c]} MB;" \
      "C ${R_ST[c,$c]} ${R_T[c,$c]} s x${R_REPS[c,$c]} ${R_MB[c,$c]} MB; ${R_CHECK[$c]}"
  done
  i=$j
done

# --- the tables -------------------------------------------------------------------------
# per-rep time in seconds of case C on SIDE (nan if it did not run)
per_rep() {
  local side=$1 c=$2
  if [ "${R_ST[$side,$c]}" != ok ]; then echo nan; return; fi
  awk -v t="${R_T[$side,$c]}" -v s="${SETUP_T[$side,${C_P[c]},${C_ARGS[c]}]}" -v r="${R_REPS[$side,$c]}" \
    'BEGIN { print (t - s) / r }'
}
# the time to show: ms, 3 significant digits; the run's status if it did not finish
show_ms() { # per-rep status
  if [ "$2" != ok ]; then echo "$2"; else awk -v t="$1" 'BEGIN { printf "%.3g", 1000 * t }'; fi
}
show_mb() { # MB status
  if [ "$2" = killed ]; then echo "> $MEM_MB"; elif [ "$1" = nan ]; then echo -; else printf '%.0f' "$1"; fi
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "nan" || b == "nan" || b <= 0) print "-"; else printf "%.3g", a / b }'; }
le() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a != "-" && a <= b) }'; }

echo
echo "array-ad: vlad $("$VLAD" --version 2>/dev/null | head -1) ($VLAD), commit $(git rev-parse --short HEAD 2>/dev/null)," \
  "SIZES=$SIZES REPS=$REPS TARGET=$TARGET METRIC=$METRIC; $(nproc) cores, $(uname -m), $(cc --version | head -1);" \
  "$(date -u '+%Y-%m-%d %H:%M UTC'), load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| program | code | compile wall s | compile CPU s | compile peak MB |"
echo "| --- | --- | --- | --- | --- |"
for p in $PROBLEMS; do
  [ -n "${HOW[$p]:-}" ] && echo "| $p.vlad | ${HOW[$p]} | ${COMPILE[$p]} |"
done
echo
echo "Times in ms per repetition ($METRIC time of a run less that of the set-up, over the repetitions);"
echo "\"own primal\" is the mode 1 row of the same size; growth is the time's ratio to the previous"
echo "size's (and the size's ratio); memory is the peak of a run, in MB.  Targets: 22 primal,"
echo "vlad / C <= 1.2; 22 forward, vlad / C <= 1.5 and growth O(n); 21 gradient, vlad <= 4x own"
echo "primal, vlad / C <= 2, vlad MB <= 3 C MB + 50; 21 O(n), growth <= 1.5 times the size's."
echo
echo "| problem | size | mode | reps vlad / C | vlad ms | C ms | vlad / C | vlad / own primal | C / own primal | vlad MB | C MB | MB vlad / C | growth | target | met | outputs |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
declare -A PREV_T PREV_N
for ((c = 0; c < NCASES; c++)); do
  p=${C_P[c]} args=${C_ARGS[c]} mode=${C_MODE[c]}
  tv=$(per_rep vlad $c) tc=$(per_rep c $c)
  # the primal of the same size
  pv=nan pc=nan
  for ((q = 0; q < NCASES; q++)); do
    if [ "${C_P[q]}" = "$p" ] && [ "${C_ARGS[q]}" = "$args" ] && [ "${C_MODE[q]}" = 1 ]; then
      pv=$(per_rep vlad $q) pc=$(per_rep c $q)
    fi
  done
  vc=$(ratio "$tv" "$tc")
  vp="-" cp="-"
  if [ "$mode" != 1 ]; then vp=$(ratio "$tv" "$pv"); cp=$(ratio "$tc" "$pc"); fi
  # growth against the previous size of the same series
  growth="-"
  if [ -n "${C_SCALE[c]}" ]; then
    series="$p ${C_SCALE[c]% *} $mode" size=${C_SCALE[c]##* }
    if [ -n "${PREV_T[$series]:-}" ] && [ "$tv" != nan ]; then
      growth="$(ratio "$tv" "${PREV_T[$series]}") (n x$(ratio "$size" "${PREV_N[$series]}"))"
    fi
    if [ "$tv" != nan ]; then PREV_T[$series]=$tv PREV_N[$series]=$size; fi
  fi
  mv=${R_MB[vlad,$c]} mc=${R_MB[c,$c]}
  target=${C_TARGET[c]} met="-" tdesc="-"
  case $target in
  22p) tdesc="22 primal"; met=no; le "$vc" 1.2 && met=yes ;;
  22f) tdesc="22 forward"; met=no
    if le "$vc" 1.5; then
      met=yes
      if [ "$growth" != "-" ]; then
        g=${growth%% *} nr=${growth##*x}; nr=${nr%)}
        awk -v g="$g" -v n="$nr" 'BEGIN { exit !(g <= 1.5 * n) }' || met=no
      fi
    fi ;;
  21g) tdesc="21 gradient"; met=no
    if le "$vp" 4 && le "$vc" 2 && [ "$mv" != nan ] && awk -v v="$mv" -v c="$mc" 'BEGIN { exit !(v <= 3 * c + 50) }'; then met=yes; fi ;;
  21h) tdesc="21 O(n)"
    if [ "$growth" != "-" ]; then
      g=${growth%% *} nr=${growth##*x}; nr=${nr%)}
      met=no; awk -v g="$g" -v n="$nr" 'BEGIN { exit !(g <= 1.5 * n) }' && met=yes
    fi
    [ "${R_ST[vlad,$c]}" != ok ] && met=no ;;
  esac
  [ "${R_ST[vlad,$c]}" != ok ] && [ "$target" != "-" ] && met=no
  echo "| $p | ${C_LABEL[c]} | $(mode_name "$p" "$mode") | ${R_REPS[vlad,$c]} / ${R_REPS[c,$c]} |" \
    "$(show_ms "$tv" "${R_ST[vlad,$c]}") | $(show_ms "$tc" "${R_ST[c,$c]}") | $vc | $vp | $cp |" \
    "$(show_mb "$mv" "${R_ST[vlad,$c]}") | $(show_mb "$mc" "${R_ST[c,$c]}") |" \
    "$(ratio "$mv" "$mc") |" \
    "$growth | $tdesc | $met | ${R_CHECK[$c]} |"
done
