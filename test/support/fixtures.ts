import { resolve } from "node:path";
import { fileURLToPath } from "node:url";

/** The repository root (this file is test/support/fixtures.ts). */
export const REPO_ROOT = resolve(fileURLToPath(new URL(".", import.meta.url)), "../..");

/**
 * Labelled speech fixtures: `../shared/fixtures/audio` beside the repository (as CI
 * lays it out), or STT_FIXTURES_DIR.
 */
export const FIXTURES_DIR = process.env.STT_FIXTURES_DIR ?? resolve(REPO_ROOT, "../shared/fixtures/audio");

export const fixturePath = (name: string) => resolve(FIXTURES_DIR, name);
