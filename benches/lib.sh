# benches/lib.sh -- shared by the run-*.sh scripts (sourced, not run): VLAD, REPS and TIMEOUT
# must be set by the caller.

# median of the numbers on stdin
median() { sort -g | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

# bench NAME FILE INPUT: runs it REPS times, prints "NAME median output", sets LAST.
# `vlad run` compiles to native code by default; these benchmarks measure the evaluator, as
# their tables say: RUN_FLAGS (default --interp) goes to `vlad run` (RUN_FLAGS= for native).
bench() {
  local name=$1 file=$2 input=$3 times=() out=""
  for ((r = 0; r < REPS; r++)); do
    local t0 t1
    t0=$(date +%s.%N)
    out=$(echo "$input" | timeout "$TIMEOUT" "$VLAD" run ${RUN_FLAGS---interp} "$file" 2>&1)
    local rc=$?
    t1=$(date +%s.%N)
    if [ $rc -ne 0 ]; then
      printf '%-34s FAILED (exit %s): %s\n' "$name" "$rc" "$(echo "$out" | head -3 | tr '\n' ' ')"
      LAST=nan
      return
    fi
    times+=("$(echo "$t1 - $t0" | bc -l)")
  done
  LAST=$(printf '%s\n' "${times[@]}" | median)
  printf '%-34s %9.3f s   -> %s\n' "$name" "$LAST" "$(echo "$out" | tr '\n' ' ' | cut -c1-60)"
}

ratio() { if [ "$1" = nan ] || [ "$2" = nan ]; then echo nan; else echo "scale=3; $1 / $2" | bc -l; fi; }

# ratio2 A B: A / B to 3 significant digits ("-" when either is nan)
ratio2() { if [ "$1" = nan ] || [ "$2" = nan ]; then echo "-"; else awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3g", a / b }'; fi; }
