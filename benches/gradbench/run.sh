#!/usr/bin/env bash
# benches/gradbench/run.sh -- the GradBench modules of `vlad gradbench` against hand-written
# Rust, side by side in one run (issue 26; the table in benches/README.md, "GradBench").
#
# Builds the driver (benches/gradbench/driver: the hand-written baselines, and a client of the
# protocol), which starts `vlad gradbench`, defines the modules, evaluates each function with
# min_runs RUNS, times RUNS calls of the Rust function on the same input in its own process,
# checks that the outputs agree within 1e-8 (GradBench's measure) and prints the Markdown table
# of medians and ratios.  Then, unless TESTS=0, runs the particle test that `cargo test` skips
# for its cost (crates/vlad-cli/tests/gradbench.rs).
#
# Usage: benches/gradbench/run.sh [MODULE...]     (from anywhere; default: every module)
# Environment:
#   VLAD    the vlad binary (default target/release/vlad, built if missing)
#   RUNS    timed calls per function, each side (default 5)
#   TESTS   1 (default): also run the ignored particle test; 0: not
#   DRIVER_TARGET  cargo target directory for the driver (default /tmp/gradbench-driver-target)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
cd "$HERE/../.."
VLAD=${VLAD:-target/release/vlad}
RUNS=${RUNS:-5}
TESTS=${TESTS:-1}
DRIVER_TARGET=${DRIVER_TARGET:-/tmp/gradbench-driver-target}
if [ ! -x "$VLAD" ]; then
  cargo build --release -p vlad-cli
fi
cargo build --release --quiet --manifest-path "$HERE/driver/Cargo.toml" --target-dir "$DRIVER_TARGET"
"$DRIVER_TARGET/release/gradbench-driver" "$VLAD" "$RUNS" "$@"
if [ "$TESTS" = 1 ]; then
  cargo test --release -p vlad-cli --test gradbench -- --ignored
fi
