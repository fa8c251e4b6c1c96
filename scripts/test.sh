#!/usr/bin/env bash
# Runs every test (unit, integration, end-to-end) against the real NATS, Postgres and
# object stores: installs/starts what is missing first, then typechecks, checks the
# architecture rules (scripts/check-architecture.sh) and runs vitest.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/setup.sh"
cd "$ROOT"
npx tsc --noEmit -p .
bash scripts/check-architecture.sh
npx vitest run "$@"
