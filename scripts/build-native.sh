#!/usr/bin/env bash
# Native helpers built from source against Debian's libraries (run by scripts/setup.sh).
# Safe to run again: each step rebuilds only when its source is newer than its binary.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

# ---- ps-worker: the embedded PocketSphinx engine (shared/pocketsphinx) ----
# A persistent decoder process: loads Debian's en-us model once, then serves clips
# over stdin/stdout. Needs pocketsphinx, pocketsphinx-en-us, libpocketsphinx-dev,
# libsphinxbase-dev, flite1-dev (keyterm pronunciations: flite's CMU lexicon and
# letter-to-sound rules), pkg-config and gcc (all in setup.sh's APT_PACKAGES). The service
# also builds it on demand (shared/pocketsphinx/build.ts) with the same
# command when it is missing.
build_ps_worker() {
  local src="shared/pocketsphinx/ps-worker.c" bin="build/ps-worker"
  if [ -x "$bin" ] && [ "$bin" -nt "$src" ]; then return 0; fi
  mkdir -p build
  printf '\033[1;34m[setup]\033[0m building %s\n' "$bin" >&2
  # shellcheck disable=SC2046
  cc -O2 -o "$bin.tmp" "$src" $(pkg-config --cflags --libs pocketsphinx) -lflite_cmulex -lflite_usenglish -lflite -lm
  mv -f "$bin.tmp" "$bin"
}

build_ps_worker
