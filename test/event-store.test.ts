import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { keyEventEnvelope, type KeyEvent } from "../domain/keys/events";
import { ack, confirmedSettlement, retry, runConsumer, terminate, type Outcome } from "../shared/consumer";
import { AppError } from "../shared/errors";
import { appendEvents, loadAggregate, loadEvents } from "../shared/event-store";
import { createLogger } from "../shared/logger";
import { ensureConsumer } from "../shared/nats";
import { evolveKey, initialKeyState } from "../domain/keys/decider";
import { isolatedNats } from "./support/nats";

let nats: Awaited<ReturnType<typeof isolatedNats>>;
beforeAll(async () => {
  nats = await isolatedNats();
});
afterAll(async () => {
  await nats?.destroy();
});

const issued = (keyId: string): { type: "KeyIssued"; data: Extract<KeyEvent, { type: "KeyIssued" }>["data"] } => ({
  type: "KeyIssued",
  data: { keyId, ownerId: "o", keyHash: "b".repeat(64), keyPrefix: "sk-x", lastFour: "abcd", plan: "free", label: null, expiresAt: null, issuedAt: new Date().toISOString() },
});

describe("event store on JetStream", () => {
  it("appends with msgID dedup: the same msgID twice stores one event", async () => {
    const subject = nats.topology.subjects.keyEvent("dup");
    const first = await appendEvents<KeyEvent>(nats.js, keyEventEnvelope, subject, [{ ...issued("dup"), msgId: "dup:issued" }]);
    const second = await appendEvents<KeyEvent>(nats.js, keyEventEnvelope, subject, [{ ...issued("dup"), msgId: "dup:issued" }]);
    expect(second.duplicates).toBe(1);
    expect(second.lastSeq).toBe(first.lastSeq);
    const { events } = await loadEvents(nats.js, nats.jsm, nats.topology.streams.keys.name, keyEventEnvelope, subject);
    expect(events).toHaveLength(1);
    expect(events[0]!.event.metadata.eventId).toBe("dup:issued");
  });

  it("enforces optimistic concurrency with expect.lastSubjectSequence", async () => {
    const subject = nats.topology.subjects.keyEvent("occ");
    const a = await appendEvents<KeyEvent>(nats.js, keyEventEnvelope, subject, [issued("occ")], { expected: "none" });
    await expect(appendEvents<KeyEvent>(nats.js, keyEventEnvelope, subject, [issued("occ")], { expected: "none" })).rejects.toMatchObject({ code: "concurrent_modification" });
    const revoke = { type: "KeyRevoked" as const, data: { keyId: "occ", revokedAt: new Date().toISOString() } };
    await appendEvents<KeyEvent>(nats.js, keyEventEnvelope, subject, [revoke], { expected: a.lastSeq });
    await expect(appendEvents<KeyEvent>(nats.js, keyEventEnvelope, subject, [revoke], { expected: a.lastSeq })).rejects.toBeInstanceOf(AppError);
  });

  it("with no expectation, another writer may append between a batch's events", async () => {
    const subject = nats.topology.subjects.keyEvent("interleaved");
    const revoke = { type: "KeyRevoked" as const, data: { keyId: "interleaved", revokedAt: new Date().toISOString() } };
    let calls = 0;
    let other: Promise<unknown> = Promise.resolve();
    // the clock runs once per event, before its publish: on the second, another writer's
    // publish goes out first on the same connection, so the stream stores it in between
    const now = () => {
      if (++calls === 2) other = appendEvents<KeyEvent>(nats.js, keyEventEnvelope, subject, [revoke]);
      return new Date();
    };
    const batch = await appendEvents<KeyEvent>(nats.js, keyEventEnvelope, subject, [issued("interleaved"), revoke], { now });
    await other;
    expect(batch.seqs[1]! - batch.seqs[0]!).toBe(2);
  });

  it("validates envelopes on write", async () => {
    const bad = { type: "KeyIssued" as const, data: { keyId: "x" } as never };
    await expect(appendEvents<KeyEvent>(nats.js, keyEventEnvelope, nats.topology.subjects.keyEvent("bad"), [bad])).rejects.toThrow();
    const { events } = await loadEvents(nats.js, nats.jsm, nats.topology.streams.keys.name, keyEventEnvelope, nats.topology.subjects.keyEvent("bad"));
    expect(events).toHaveLength(0);
  });

  it("loads an aggregate by folding only its own subject", async () => {
    const s1 = nats.topology.subjects.keyEvent("fold1");
    await appendEvents<KeyEvent>(nats.js, keyEventEnvelope, s1, [issued("fold1")]);
    await appendEvents<KeyEvent>(nats.js, keyEventEnvelope, nats.topology.subjects.keyEvent("fold2"), [issued("fold2")]);
    await appendEvents<KeyEvent>(nats.js, keyEventEnvelope, s1, [{ type: "KeyRevoked", data: { keyId: "fold1", revokedAt: "2026-01-01T00:00:00.000Z" } }]);
    const { state, events, lastSeq } = await loadAggregate(nats.js, nats.jsm, nats.topology.streams.keys.name, keyEventEnvelope, s1, initialKeyState, evolveKey);
    expect(events.map((e) => e.event.type)).toEqual(["KeyIssued", "KeyRevoked"]);
    expect(state).toMatchObject({ status: "revoked", keyId: "fold1", revokedAt: "2026-01-01T00:00:00.000Z" });
    expect(lastSeq).toBe(events[1]!.seq);
    const empty = await loadAggregate(nats.js, nats.jsm, nats.topology.streams.keys.name, keyEventEnvelope, nats.topology.subjects.keyEvent("none"), initialKeyState, evolveKey);
    expect(empty).toMatchObject({ state: { status: "none" }, lastSeq: 0, events: [] });
  });
});

describe("consumer wrapper", () => {
  it("maps ack / retry / terminate / thrown errors and bounds concurrency", async () => {
    const stream = nats.topology.streams.usage.name;
    const durable = "wrapper_test";
    await ensureConsumer(nats.jsm, { stream, durable, ackWaitMs: 5000, maxDeliver: 5, maxAckPending: 100, deliver: "all" });
    const seen = new Map<string, number>();
    let inFlight = 0;
    let maxInFlight = 0;
    const outcomes: Record<string, (n: number) => Outcome> = {
      ok: () => ack(),
      retryOnce: (n) => (n === 1 ? retry(10) : ack()),
      term: () => terminate("permanent"),
    };
    const done = new Promise<void>((resolve) => {
      const check = () => {
        if ((seen.get("ok") ?? 0) >= 1 && (seen.get("retryOnce") ?? 0) >= 2 && (seen.get("term") ?? 0) >= 1 && (seen.get("throwRetryable") ?? 0) >= 2 && (seen.get("throwPermanent") ?? 0) >= 1) resolve();
      };
      const timer = setInterval(check, 20);
      void timer;
    });
    const running = await runConsumer(nats.js, { stream, durable, concurrency: 2, logger: createLogger("error"), backoffMs: () => 10 }, async (msg) => {
      const kind = msg.subject.split(".").at(-1)!;
      const n = (seen.get(kind) ?? 0) + 1;
      seen.set(kind, n);
      inFlight++;
      maxInFlight = Math.max(maxInFlight, inFlight);
      await new Promise((r) => setTimeout(r, 20));
      inFlight--;
      if (kind === "throwRetryable") {
        if (n === 1) throw new AppError("unavailable", "flaky", "try again");
        return ack();
      }
      if (kind === "throwPermanent") throw new AppError("validation", "bad_input", "never works");
      return outcomes[kind]!(n);
    });
    for (const kind of ["ok", "retryOnce", "term", "throwRetryable", "throwPermanent"]) {
      await nats.js.publish(nats.topology.subjects.usageEvent(kind), "{}");
    }
    await done;
    // every message settled (acked or terminated): nothing is left to deliver again
    for (const deadline = Date.now() + 30_000; ; ) {
      const info = await nats.jsm.consumers.info(stream, durable);
      if (info.num_ack_pending === 0 && info.num_pending === 0) break;
      if (Date.now() > deadline) throw new Error(`messages never settled: ${JSON.stringify({ ack_pending: info.num_ack_pending, pending: info.num_pending })}`);
      await new Promise((r) => setTimeout(r, 20));
    }
    await running.stop();
    expect(seen.get("ok")).toBe(1);
    expect(seen.get("retryOnce")).toBe(2);
    expect(seen.get("term")).toBe(1);
    expect(seen.get("throwRetryable")).toBe(2);
    expect(seen.get("throwPermanent")).toBe(1);
    expect(maxInFlight).toBeLessThanOrEqual(2);
    const info = await nats.jsm.consumers.info(stream, durable);
    expect({ ackPending: info.num_ack_pending, pending: info.num_pending, redelivered: info.num_redelivered }).toMatchObject({ ackPending: 0, pending: 0 });
    expect(info.num_pending).toBe(0);
  });

  it("acks through nats.js's confirmed ack (JsMsg.ackAck), and finds its confirmed nak and term in the pinned nats.js", async () => {
    const stream = nats.topology.streams.usage.name;
    const durable = "settle_test";
    // a long ack wait: a settlement the server did not apply would show as a 30 s stall
    await ensureConsumer(nats.jsm, { stream, durable, ackWaitMs: 30_000, maxDeliver: 5, maxAckPending: 100, deliver: "new" });
    const seen = new Map<string, number>();
    let ackAcks = 0;
    let confirmable = 0;
    const running = await runConsumer(nats.js, { stream, durable, concurrency: 2, logger: createLogger("error") }, async (msg) => {
      // nak, term and a repeated ack go through this; nats.js renaming what it needs fails here
      if (confirmedSettlement(nats.js, msg)) confirmable++;
      const ackAck = msg.ackAck.bind(msg);
      msg.ackAck = (opts) => {
        ackAcks++;
        return ackAck(opts);
      };
      const kind = msg.subject.split(".").at(-1)!;
      const n = (seen.get(kind) ?? 0) + 1;
      seen.set(kind, n);
      return kind === "settle-retry" && n === 1 ? retry(10) : ack();
    });
    for (const kind of ["settle-plain", "settle-retry"]) await nats.js.publish(nats.topology.subjects.usageEvent(kind), "{}");
    // both applied well before the ack wait: the nak's redelivery came after its 10 ms, the acks left nothing pending
    for (const deadline = Date.now() + 20_000; ; ) {
      const info = await nats.jsm.consumers.info(stream, durable);
      if (seen.get("settle-retry") === 2 && info.num_ack_pending === 0 && info.num_pending === 0) break;
      if (Date.now() > deadline) throw new Error(`not settled before the ack wait: ${JSON.stringify({ seen: [...seen], ack_pending: info.num_ack_pending })}`);
      await new Promise((r) => setTimeout(r, 20));
    }
    await running.stop();
    expect(seen.get("settle-plain")).toBe(1);
    expect(ackAcks).toBe(2);
    expect(confirmable).toBe(3);
  });
});
