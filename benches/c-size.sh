#!/usr/bin/env bash
# benches/c-size.sh -- the size of the generated C and the time to compile it, against the size
# of the program, for the shapes that once made the C grow faster than the program (issue 23):
#
#   list    a list of n calls on one line: (list (real 0) (real 1) ...), each an error site on
#           that one long line
#   cond    a `cond` of n clauses (nesting n deep)
#   array   an array literal of n reals
#   letstar a `let*` of n bindings, each a call (a long chain of statements)
#
# For each shape and n in SIZES: the program's bytes, `vlad compile --emit c` bytes, the time
# of `vlad compile -o` (the analysis, the C and the C compiler), and that the program prints
# what the evaluator prints. The C must grow linearly: C/source about constant down a column.
#
# Usage: benches/c-size.sh [VLAD]      (default target/release/vlad)
#   SIZES="1000 2000 4000 8000"
set -uo pipefail
cd "$(dirname "$0")/.."
VLAD=${1:-target/release/vlad}
SIZES=${SIZES:-1000 2000 4000 8000}
TIMEOUT=${TIMEOUT:-600}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
export VLAD_CACHE_DIR=$WORK/cache

gen() {
  local shape=$1 n=$2 i
  case $shape in
  list)
    printf '(define (sum l) (if (null? l) 0 (let (((cons a d) l)) (+ a (sum d)))))\n(sum (list'
    for ((i = 0; i < n; i++)); do printf ' (real %d)' "$i"; done
    printf '))\n'
    ;;
  cond)
    printf '(define (f x)\n  (cond'
    for ((i = 0; i < n; i++)); do printf '\n   ((= x %d) %d)' "$i" "$((i * 2))"; done
    printf '\n   (else -1)))\n(f (real %d))\n' "$((n - 1))"
    ;;
  array)
    printf '(define a #('
    for ((i = 0; i < n; i++)); do printf ' %d.5' "$i"; done
    printf '))\n(get a (real %d))\n(array-length a)\n' "$((n - 1))"
    ;;
  letstar)
    printf '(let* ((x0 (real 1))'
    for ((i = 1; i < n; i++)); do printf '\n       (x%d (+ x%d (sin x%d)))' "$i" "$((i - 1))" "$((i - 1))"; done
    printf ')\n  x%d)\n' "$((n - 1))"
    ;;
  esac
}

echo "vlad: C size and compile time against program size; $VLAD; $(nproc) cores, $(date -u '+%Y-%m-%d %H:%M UTC')"
echo
echo "| shape | n | source KB | C KB | C / source | compile CPU s | same as evaluator |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
for shape in list cond array letstar; do
  for n in $SIZES; do
    f=$WORK/$shape-$n.vlad
    gen "$shape" "$n" >"$f"
    src=$(wc -c <"$f")
    c=$(timeout "$TIMEOUT" "$VLAD" compile "$f" --emit c 2>/dev/null | wc -c)
    # CPU seconds (user + system, the C compiler included): the machine is shared.
    if /usr/bin/time -f '%U %S' -o "$WORK/time" timeout "$TIMEOUT" "$VLAD" compile "$f" \
        -o "$WORK/exe" 2>"$WORK/err"; then
      secs=$(tail -1 "$WORK/time" | awk '{ print $1 + $2 }')
      native=$("$WORK/exe" 2>&1)
      eval=$(timeout "$TIMEOUT" "$VLAD" run --interp "$f" 2>&1)
      same=$([ "$native" = "$eval" ] && echo yes || echo NO)
    else
      secs=nan; same="compile failed: $(head -c 100 "$WORK/err")"
    fi
    printf '| %s | %d | %.1f | %.1f | %.1f | %.2f | %s |\n' "$shape" "$n" \
      "$(echo "$src / 1000" | bc -l)" "$(echo "$c / 1000" | bc -l)" \
      "$(echo "$c / $src" | bc -l)" "$secs" "$same"
  done
done
