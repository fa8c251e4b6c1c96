import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createJobStore } from "../domain/jobs/store";
import { now, spec } from "../domain/jobs/test-fixtures";
import { isolatedNats } from "./support/nats";

/**
 * The job store never decides on a read that is behind an event the caller has seen
 * (a direct get answered by a replica that has not applied it yet): the read is retried,
 * then refused as retryable, so the consumer that asked redelivers instead of acking a
 * decision made on a state that misses the event.
 */
let nats: Awaited<ReturnType<typeof isolatedNats>>;
beforeAll(async () => {
  nats = await isolatedNats();
});
afterAll(async () => {
  await nats?.destroy();
});

describe("job store reads at least up to the event a consumer reacts to", () => {
  it("given a job whose last event is at seq N, a load asking for N returns it; asking for a later seq is refused as retryable, and an Advance on it appends nothing", async () => {
    const store = createJobStore(nats);
    const workflowId = randomUUID();
    const { events } = await store.execute(workflowId, { type: "SubmitJob", spec: { ...spec, workflowId }, now });
    expect(events.map((e) => e.type)).toEqual(["JobSubmitted"]);
    const { lastSeq } = await store.load(workflowId);
    expect(lastSeq).toBeGreaterThan(0);
    expect((await store.load(workflowId, { atLeastSeq: lastSeq })).lastSeq).toBe(lastSeq);

    // a fresh store (another process) asked about an event it cannot read yet
    const other = createJobStore(nats);
    await expect(other.load(workflowId, { atLeastSeq: lastSeq + 1000 })).rejects.toMatchObject({ code: "event_store_behind", retryable: true });
    await expect(other.execute(workflowId, { type: "Advance", now, reviewAvailable: false }, { atLeastSeq: lastSeq + 1000 })).rejects.toMatchObject({ code: "event_store_behind" });
    expect((await other.load(workflowId)).lastSeq).toBe(lastSeq);
  });

  it("given a job with several events, a fresh store reading through the stream leader folds the same state as direct gets do", async () => {
    const store = createJobStore(nats);
    const workflowId = randomUUID();
    await store.execute(workflowId, { type: "SubmitJob", spec: { ...spec, workflowId }, now });
    await store.execute(workflowId, { type: "Advance", now, reviewAvailable: false });
    const direct = await createJobStore(nats).load(workflowId);
    const leader = await createJobStore(nats).load(workflowId, { fromLeader: true });
    expect(leader.lastSeq).toBe(direct.lastSeq);
    expect(leader.state).toEqual(direct.state);
    expect(leader.state.status).not.toBe("none");
    // nothing of another job: a leader read past the job's last event finds no more
    expect((await createJobStore(nats).load(randomUUID(), { fromLeader: true })).state.status).toBe("none");
  });
});
