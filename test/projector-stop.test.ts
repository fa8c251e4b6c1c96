import { expect, it } from "vitest";
import { startStack } from "./support/stack";
import { startRuntime } from "../services/stt/runtime";
import { createLogger } from "../shared/logger";

// A projector stopped while its projections are still starting (a deploy that rolls a
// process right after it came up) stops: stop() used to find no consumer to close yet,
// and the consumer opened a moment later kept the process waiting for events forever.
it("a projector stopped right after it starts stops promptly", async () => {
  const stack = await startStack();
  try {
    const config = { ...stack.config, services: ["projector"], http: { ...stack.config.http, metricsPort: 0 } };
    const runtime = await startRuntime(config, createLogger("error"));
    const t = Date.now();
    await Promise.race([runtime.stop(), new Promise((_, reject) => setTimeout(() => reject(new Error("stop hung")), 10_000))]);
    expect(Date.now() - t).toBeLessThan(10_000);
  } finally {
    await stack.stop();
  }
}, 60_000);
