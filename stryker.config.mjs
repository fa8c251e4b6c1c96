// Mutation testing of the pure deciders and rules (docs/DEVELOPING.md): Stryker changes
// one thing at a time in these files (an operator, a condition, a constant) and runs the
// unit tests that cover it; a mutant no test notices is a behaviour the tests do not pin.
// Run with `npm run mutation` (scripts/mutation.sh), or one file with
// `npm run mutation -- --mutate domain/jobs/decider.ts`.
import { readFileSync } from "node:fs";

/**
 * `file:from-to`, the lines of the top-level function or const that starts with `start`
 * (to the next line that closes it at the margin): the pure parts of a file that is
 * otherwise I/O, found by name so edits above them do not shift the range.
 */
function linesOf(file, start) {
  const lines = readFileSync(new URL(file, import.meta.url), "utf8").split("\n");
  const from = lines.findIndex((l) => l.startsWith(start));
  if (from < 0) throw new Error(`${file}: no line starts with ${start}`);
  const to = lines[from].trimEnd().endsWith(";") ? from : lines.findIndex((l, i) => i > from && /^}/.test(l));
  return `${file}:${from + 1}-${to + 1}`;
}

/** @type {import('@stryker-mutator/api/core').PartialStrykerOptions} */
export default {
  testRunner: "vitest",
  plugins: ["@stryker-mutator/vitest-runner"],
  vitest: { configFile: "vitest.mutation.config.ts", related: true },
  mutate: [
    "domain/jobs/decider.ts",
    "domain/jobs/views.ts",
    "domain/keys/decider.ts",
    "domain/sessions/decider.ts",
    "domain/sessions/close-rules.ts",
    "domain/sessions/connection.ts",
    "domain/sessions/admission.ts",
    "domain/sessions/end-of-turn.ts",
    "services/stt/layout.ts",
    "shared/audio/vad.ts",
    // the transcript pipeline: smart format (split over four files) and the append-only rule of streamed items
    "domain/transcript/smart-format.ts",
    "domain/transcript/spoken-forms.ts",
    "domain/transcript/terms.ts",
    "domain/transcript/word-shape.ts",
    "domain/transcript/smart-format-stage.ts",
    "domain/transcript/pipeline.ts",
    "domain/transcript/item-transcript.ts",
    "services/webhooks/signature.ts",
    // the pure parts only: the headers and the block size (the counter itself is NATS I/O,
    // covered by test/rate-limit.test.ts)
    linesOf("shared/rate-limit.ts", "export function rateHeaders("),
    linesOf("shared/rate-limit.ts", "export const rateBlockSize ="),
    // the upgrade's audio parameters (the rest of admit() is I/O, covered by test/realtime*.test.ts)
    linesOf("services/realtime-gateway/admit.ts", "export function parseAudioParams("),
  ],
  coverageAnalysis: "perTest",
  // Static mutants (module-level constants) rerun every test file each; they were 6% of
  // the mutants and 41% of the time. `npm run mutation -- --ignoreStatic false` for them.
  ignoreStatic: true,
  // the machine is shared: one test process at a time
  concurrency: 1,
  timeoutMS: 20000,
  ignorePatterns: ["build", ".data", "deploy", "bench", "coverage", "reports", ".stryker-tmp"],
  reporters: ["clear-text", "progress", "json"],
  jsonReporter: { fileName: "reports/mutation/mutation.json" },
  thresholds: { high: 90, low: 80, break: null },
  tempDirName: ".stryker-tmp",
  cleanTempDir: "always",
};
