#!/usr/bin/env bash
# Runs a benchmark against the real NATS and Postgres (installed/started as for the
# tests): ./scripts/bench.sh segment|segment-parallel|jobs|realtime|realtime-overload|doors|end-of-turn|format|formatting|whisper|diarization|resume [benchmark flags]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
name="${1:-}"
case "$name" in
  segment|segment-parallel|jobs|realtime|realtime-overload|doors|end-of-turn|format|formatting|whisper|diarization|resume) shift ;;
  *) echo "usage: scripts/bench.sh segment|segment-parallel|jobs|realtime|realtime-overload|doors|end-of-turn|format|formatting|whisper|diarization|resume [flags]" >&2; exit 2 ;;
esac
source "$ROOT/scripts/setup.sh"
cd "$ROOT"
exec node_modules/.bin/tsx "bench/$name.ts" "$@"
