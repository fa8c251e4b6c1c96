import { randomUUID } from "node:crypto";
import { AckPolicy } from "@nats-io/jetstream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadEvents } from "../shared/event-store";
import { createLogger } from "../shared/logger";
import { findJob } from "../domain/jobs/queries";
import { createJobStore } from "../domain/jobs/store";
import { jobEventEnvelope } from "../domain/jobs/events";
import { spec } from "../domain/jobs/test-fixtures";
import { startProcessManager } from "../services/jobs/process-manager";
import { waitFor } from "./support/jobs-helpers";
import { startStack, type Stack } from "./support/stack";

/**
 * A job whose next decision was lost (the process manager acked the event it reacted to,
 * and what it appended did not survive a node's loss) is advanced again by the idle-job
 * sweep, read afresh from the stream leader; a job whose step is in flight is left alone.
 * The stack runs the projector only, so the process manager here is the only one.
 */
let stack: Stack;
beforeAll(async () => {
  stack = await startStack({ STT_SERVICES: "http-gateway,projector" });
});
afterAll(async () => {
  await stack?.stop();
});

const DURABLE = "jobs-process-manager";

describe("the process manager's idle-job sweep", () => {
  it("given a submitted job whose event was acked with no decision, the sweep starts its first step once; a step in flight is not started again", async () => {
    const { nats, db } = stack;
    const stream = nats.topology.streams.jobs.name;
    const workflowId = randomUUID();
    await createJobStore(nats).execute(workflowId, { type: "SubmitJob", spec: { ...spec, workflowId, requestId: `lost-${workflowId}` }, now: new Date().toISOString() });
    await waitFor(async () => (await findJob(db, workflowId))?.status === "queued", { timeoutMs: 10_000, what: "the job in the read model" });

    // The process manager's durable has taken the JobSubmitted and acked it, deciding nothing.
    await nats.jsm.consumers.add(stream, { durable_name: DURABLE, filter_subject: nats.topology.subjects.jobEvents, ack_policy: AckPolicy.Explicit, ack_wait: 30_000_000_000, max_deliver: 50, max_ack_pending: 5000 });
    const consumer = await nats.js.consumers.get(stream, DURABLE);
    const taken = await consumer.next({ expires: 2000 });
    expect(taken && jobEventEnvelope.parse(taken.json()).type).toBe("JobSubmitted");
    await taken!.ackAck();

    const pm = await startProcessManager({
      nats,
      store: createJobStore(nats),
      logger: createLogger("error"),
      now: () => new Date(),
      reviewAvailable: false,
      db,
      idleAfterMs: 1500,
      usage: stack.runtime.ctx.usage,
    });
    try {
      const events = async () => (await loadEvents(nats.js, nats.jsm, stream, jobEventEnvelope, nats.topology.subjects.jobEvent(workflowId))).events.map((r) => r.event);
      const started = await waitFor(
        async () => {
          const s = (await events()).filter((e) => e.type === "StepStarted");
          return s.length ? s : undefined;
        },
        { timeoutMs: 15_000, what: "the sweep to start the job's first step" },
      );
      expect(started.map((e) => (e.type === "StepStarted" ? `${e.data.step}:${e.data.attempt}` : ""))).toEqual(["fetch:1"]);
      await waitFor(async () => (await findJob(db, workflowId))?.status === "running", { timeoutMs: 10_000, what: "the running job in the read model" });

      // No fetcher runs: the fetch step stays in flight, quiet for more than twice idleAfter.
      await new Promise((r) => setTimeout(r, 4000));
      expect((await events()).map((e) => e.type)).toEqual(["JobSubmitted", "StepStarted"]);
    } finally {
      await pm.stop();
    }
  });
});
