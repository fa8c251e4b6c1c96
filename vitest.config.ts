import { defineConfig } from "vitest/config";

// Unit tests sit beside the code; integration and end-to-end tests live in test/ and
// talk to the real nats-server, Postgres and object store. Each integration file
// isolates itself (own stream prefix, schema, bucket), so files may run in parallel,
// but the machine has two cores: keep the worker count small.
export default defineConfig({
  test: {
    projects: [
      {
        test: {
          name: "unit",
          sequence: { groupOrder: 0 },
          include: ["domain/**/*.test.ts", "services/**/*.test.ts", "shared/**/*.test.ts", "schemas/**/*.test.ts", "bench/**/*.test.ts"],
          testTimeout: 20_000,
        },
      },
      {
        test: {
          name: "integration",
          sequence: { groupOrder: 1 },
          include: ["test/**/*.test.ts"],
          // every realtime message a test receives must be described in /asyncapi.json
          setupFiles: ["test/support/documented-messages-guard.ts"],
          testTimeout: 120_000,
          hookTimeout: 120_000,
          maxWorkers: 2,
          // Realtime admission by headroom (domain/sessions/admission.ts) measures this
          // machine's load: with the suite's files in parallel on two cores, a loop delay
          // over the production bound is a matter of chance, so the stacks (and the
          // processes they spawn, which inherit this) admit generously; the tests of
          // admission and shedding set their own bounds.
          env: { RT_ADMIT_MAX_LOOP_DELAY_MS: "5000", RT_ADMIT_MAX_VAD_LAG_MS: "10000", RT_ADMIT_MAX_DECISION_MS: "10000", RT_ADMIT_MAX_ENGINE_SHARE: "1", RT_ENGINE_SPEAKER_CORES: "0.001", RT_ADMIT_BURST: "100000", RT_SHED_LAG_MS: "60000" },
        },
      },
    ],
  },
});
