import { execFile } from "node:child_process";
import { mkdir, stat } from "node:fs/promises";
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

/**
 * Where the ps-worker binary is, and how it is built: ps-worker.c (beside this file)
 * compiled against Debian's libpocketsphinx (pocketsphinx, pocketsphinx-en-us,
 * libpocketsphinx-dev, libsphinxbase-dev) and flite (flite1-dev) into build/ps-worker. Three services run it:
 * the embedded engine (services/transcriber/pocketsphinx), the jobs-reviewer's aligner
 * and the VAD's streaming decoders. scripts/build-native.sh (run by scripts/setup.sh) runs
 * the same command; this is the on-demand path for a fresh checkout, rebuilding only when
 * the source is newer than the binary.
 */
const here = dirname(fileURLToPath(import.meta.url));
const pocketsphinxSource = resolve(here, "ps-worker.c");
const defaultPocketsphinxBinary = resolve(here, "../../build/ps-worker");

const run = promisify(execFile);

/** flite's CMU lexicon and letter-to-sound rules (flite1-dev): pronunciations for keyterms the dictionary lacks. */
const FLITE_LIBS = ["-lflite_cmulex", "-lflite_usenglish", "-lflite"];

export async function ensurePocketsphinxBinary(binary = defaultPocketsphinxBinary): Promise<string> {
  return buildAgainstPocketsphinx(pocketsphinxSource, binary);
}

/**
 * Compiles a C program against libpocketsphinx with the line scripts/build-native.sh
 * uses, when the binary is missing or older than its source (ps-worker here, the
 * bench's bare-API decoder in bench/engine-cost.ts).
 */
export async function buildAgainstPocketsphinx(source: string, binary: string): Promise<string> {
  const [src, bin] = await Promise.all([stat(source), stat(binary).catch(() => undefined)]);
  if (bin && bin.mtimeMs >= src.mtimeMs) return binary;
  await mkdir(dirname(binary), { recursive: true });
  const { stdout: flags } = await run("pkg-config", ["--cflags", "--libs", "pocketsphinx"]);
  const tmp = `${binary}.${process.pid}.tmp`;
  await run("cc", ["-O2", "-o", tmp, source, ...flags.trim().split(/\s+/), ...FLITE_LIBS, "-lm"]);
  await run("mv", ["-f", tmp, binary]);
  return binary;
}
