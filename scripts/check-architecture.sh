#!/usr/bin/env bash
# The architecture rules (docs/DEVELOPING.md, "Architecture checks"), run by scripts/test.sh
# after tsc and so by .ci/run; exits non-zero on any violation:
#   1. imports: the layering of .dependency-cruiser.cjs (schemas/ ← shared/ ← domain/ ←
#      services/<X>/, no service importing another but the composition root services/stt/,
#      no import circle);
#   2. size: no source file over 400 lines in services/, domain/, shared/ or schemas/, and
#      none over 300 in services/realtime-gateway/ (issue 46: it had reached the cap by
#      moving pieces out; unit tests beside the code and the C worker,
#      shared/pocketsphinx/ps-worker.c, aside);
#   3. function length (scripts/function-lengths.mjs, TypeScript's own parser): in services/
#      and domain/ no function whose own body, nested functions aside, is over 100 lines;
#      in services/realtime-gateway/ no function over 150 lines, nested ones included;
#   4. dead code: no unused file, export, exported type or dependency (knip, knip.json).
# The environment-read rule (only shared/config.ts reads process.env) is a test:
# test/architecture.test.ts.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
MAX_LINES=400
# the realtime gateway's files: a shell around the connection decider (domain/sessions/connection.ts)
GATEWAY_MAX_LINES=300
status=0

dirs=()
for d in services domain shared schemas; do [ -d "$d" ] && dirs+=("$d"); done
if ! node_modules/.bin/depcruise --config .dependency-cruiser.cjs --output-type err "${dirs[@]}"; then
  status=1
fi

long=()
while IFS= read -r -d '' f; do
  n=$(wc -l <"$f")
  max=$MAX_LINES
  [[ "$f" == services/realtime-gateway/* ]] && max=$GATEWAY_MAX_LINES
  ((n > max)) && long+=("$f: $n lines (over $max)")
done < <(find services domain shared schemas -type f -name '*.ts' ! -name '*.test.ts' -print0 2>/dev/null | sort -z)
if ((${#long[@]})); then
  printf 'files too long (split them by what they do):\n' >&2
  printf '  %s\n' "${long[@]}" >&2
  status=1
fi

if ! node scripts/function-lengths.mjs; then
  status=1
fi

if ! node_modules/.bin/knip --no-progress; then
  echo "knip: unused files, exports or dependencies above (remove them, or export only what is imported)" >&2
  status=1
fi

((status == 0)) && echo "architecture: imports, file and function sizes and dead code within the rules"
exit "$status"
