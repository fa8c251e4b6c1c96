#!/usr/bin/env bash
# Mutation testing of the pure deciders and rules (stryker.config.mjs): prints each
# file's mutation score and the total, and leaves the full report in
# reports/mutation/mutation.json. CPU-bound and one test process at a time; not part of
# .ci/run (docs/DEVELOPING.md says how long it takes). Needs no NATS or Postgres.
#   bash scripts/mutation.sh                                  # every decider
#   bash scripts/mutation.sh --mutate domain/jobs/decider.ts  # one file
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# the tests run in a copy of the tree (.stryker-tmp/sandbox-*), where the speech
# fixtures' usual place beside the repository is not found
if [ -z "${STT_FIXTURES_DIR:-}" ]; then
  STT_FIXTURES_DIR="$(node --import tsx -e 'import("./test/support/fixtures.ts").then((m) => console.log(m.FIXTURES_DIR))')"
  export STT_FIXTURES_DIR
fi
start=$(date +%s)
npx stryker run stryker.config.mjs "$@"
node scripts/mutation-summary.mjs reports/mutation/mutation.json
echo "mutation run took $(( $(date +%s) - start )) s"
