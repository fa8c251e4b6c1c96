import { defineConfig } from "vitest/config";

/**
 * The unit tests of the pure deciders and rules that mutation testing checks
 * (stryker.config.mjs, scripts/mutation.sh): each mutant runs only the tests among
 * these that cover it, so the list is kept to the tests beside the mutated files.
 */
export default defineConfig({
  test: {
    include: [
      "domain/jobs/decider.test.ts",
      "domain/jobs/views.test.ts",
      "domain/keys/decider.test.ts",
      "domain/sessions/decider.test.ts",
      "domain/sessions/close-rules.test.ts",
      "domain/sessions/connection.test.ts",
      "domain/sessions/admission.test.ts",
      "domain/sessions/end-of-turn.test.ts",
      "services/stt/layout.test.ts",
      "shared/audio/vad.test.ts",
      "domain/transcript/smart-format.test.ts",
      "domain/transcript/pipeline.test.ts",
      "domain/transcript/item-transcript.test.ts",
      "services/webhooks/signature.test.ts",
      "shared/rate-limit.test.ts",
      "services/realtime-gateway/admit.test.ts",
    ],
    testTimeout: 20_000,
    // one worker: the mutation run is CPU-bound and the machine is shared
    maxWorkers: 1,
  },
});
