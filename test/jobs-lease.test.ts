import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connectNats, destroyTopology, type Nats } from "../shared/nats";
import { createStepLeases, StepBusy } from "../services/jobs/step-lease";
import { randomHex } from "./support/jobs-helpers";

// Step leases on the real NATS KV bucket, with an injected clock for expiry.
let nats: Nats;

beforeAll(async () => {
  nats = await connectNats({ url: process.env.NATS_URL ?? "nats://127.0.0.1:4222", prefix: `t${randomHex()}` });
});
afterAll(async () => {
  await destroyTopology(nats);
  await nats.close();
});

describe("step leases", () => {
  it("lets one holder run a step at a time, also within one process", async () => {
    const leases = createStepLeases(() => nats.kv("leases"), { ttlMs: 60_000 });
    const first = await leases.acquire("w1", "transcribe_chunk_0");
    const busy = await leases.acquire("w1", "transcribe_chunk_0").catch((e) => e);
    expect(busy).toBeInstanceOf(StepBusy);
    expect(busy.code).toBe("step_busy");
    expect(busy.retryInMs).toBeGreaterThan(50_000);
    const other = await leases.acquire("w1", "transcribe_chunk_1");
    await first.release();
    const again = await leases.acquire("w1", "transcribe_chunk_0");
    await again.release();
    await other.release();
  });

  it("takes over a lease whose holder died once it has expired", async () => {
    let clock = 1_000_000;
    const dead = createStepLeases(() => nats.kv("leases"), { ttlMs: 10_000, now: () => clock });
    const alive = createStepLeases(() => nats.kv("leases"), { ttlMs: 10_000, now: () => clock });
    await dead.acquire("w2", "fetch"); // never released: its holder "crashed"
    await expect(alive.acquire("w2", "fetch")).rejects.toBeInstanceOf(StepBusy);
    clock += 10_001;
    const taken = await alive.acquire("w2", "fetch");
    await expect(dead.acquire("w2", "fetch")).rejects.toBeInstanceOf(StepBusy);
    await taken.release();
  });
});
