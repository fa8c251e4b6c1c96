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
          include: ["services/**/*.test.ts", "domain/**/*.test.ts", "shared/**/*.test.ts", "schemas/**/*.test.ts"],
          testTimeout: 20_000,
        },
      },
      {
        test: {
          name: "integration",
          sequence: { groupOrder: 1 },
          include: ["test/**/*.test.ts"],
          testTimeout: 120_000,
          hookTimeout: 120_000,
          maxWorkers: 2,
        },
      },
    ],
  },
});
