#!/usr/bin/env bash
# Runs the whole service with embedded defaults on one base URL (default
# http://127.0.0.1:8080): installs/starts what is missing, then `stt supervise`, which
# runs the services as `stt serve` processes by STT_LAYOUT (docs/operations.md,
# "Process layout").
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/setup.sh"
cd "$ROOT"
# `stt supervise` restarts each of them if it ever stops on a fatal error. Safe to run
# again after a crash or `kill -9`: the children share the supervisor's process group
# (a `kill -9` of the group ends them with it), and a child whose supervisor alone was
# killed closes its listeners and exits within 300 ms; the new one waits for its port
# rather than share it (docs/operations.md, "Stopping and restarting").
exec bin/stt supervise
