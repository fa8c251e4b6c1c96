import { existsSync } from "node:fs";
import { resolve } from "node:path";
import { fileURLToPath } from "node:url";

/** The repository root (this file is test/support/fixtures.ts). */
export const REPO_ROOT = resolve(fileURLToPath(new URL(".", import.meta.url)), "../..");

/**
 * Labelled speech fixtures: STT_FIXTURES_DIR, else `../shared/fixtures/audio` beside the
 * repository (as CI lays it out), else the workspace's `/work/shared` (a clone made
 * elsewhere on a developer machine).
 */
export const FIXTURES_DIR =
  process.env.STT_FIXTURES_DIR ??
  [resolve(REPO_ROOT, "../shared/fixtures/audio"), "/work/shared/fixtures/audio"].find((dir) => existsSync(dir)) ??
  resolve(REPO_ROOT, "../shared/fixtures/audio");

export const fixturePath = (name: string) => resolve(FIXTURES_DIR, name);

/** PCM clips one after another, in one array. */
export function concatPcm(...parts: Int16Array[]): Int16Array {
  const out = new Int16Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}
