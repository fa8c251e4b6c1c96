#!/usr/bin/env bash
# Runs a benchmark against the real NATS and Postgres (installed/started as for the
# tests): ./scripts/bench.sh segment|segment-parallel|jobs|realtime|realtime-overload|doors|end-of-turn|format|formatting|whisper|whisper-cost|whisper-capacity|diarization|resume|wer|keyterms [benchmark flags]
# The benches that record results (bench/support/results.ts) write them to
# bench/results/<bench>-<date>.json (BENCH_RESULTS_DIR, empty for none):
# the machine, the date, the commit, this command and the figures.
# ./scripts/bench.sh plots redraws docs/benchmarks.md and its charts from those files.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
name="${1:-}"
if [ "$name" = plots ]; then
  shift
  cd "$ROOT"
  exec node_modules/.bin/tsx bench/plot.ts "$@"
fi
case "$name" in
  segment|segment-parallel|jobs|realtime|realtime-overload|doors|end-of-turn|format|formatting|whisper|whisper-cost|whisper-capacity|diarization|resume|wer|keyterms) shift ;;
  *) echo "usage: scripts/bench.sh plots | segment|segment-parallel|jobs|realtime|realtime-overload|doors|end-of-turn|format|formatting|whisper|whisper-cost|whisper-capacity|diarization|resume|wer|keyterms [flags]" >&2; exit 2 ;;
esac
export BENCH_COMMAND="./scripts/bench.sh $name${*:+ $*}"
export BENCH_RESULTS_DIR="${BENCH_RESULTS_DIR-$ROOT/bench/results}"
source "$ROOT/scripts/setup.sh"
cd "$ROOT"
exec node_modules/.bin/tsx "bench/$name.ts" "$@"
