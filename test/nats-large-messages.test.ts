import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { headers } from "@nats-io/transport-node";
import { Parser, ProtocolHandler } from "@nats-io/nats-core/internal";
import { preallocateSpanningMessages, releaseMessageData } from "../shared/nats-parser";
import { writeLargePayloadsInPlace } from "../shared/nats-writer";
import { installNatsPatches } from "../shared/nats-patches";
import { natsPatchActive, natsPatchRuns } from "../shared/metrics";
import { isolatedNats } from "./support/nats";

/**
 * shared/nats-parser.ts gives a message that spans socket reads one buffer of its whole
 * size, and shared/nats-writer.ts writes large payloads without packing them. Messages of every size around the 64 KB reads, with and without headers, must
 * arrive byte for byte, over core NATS and through a JetStream consumer, on the real
 * nats-server.
 */
let nats: Awaited<ReturnType<typeof isolatedNats>>;

beforeAll(async () => {
  nats = await isolatedNats();
});

afterAll(async () => {
  await nats?.destroy();
});

const SIZES = [0, 1, 65_535, 65_536, 70_001, 200_000, 333_333, 1_000_000];

function payload(size: number, seed: number): Uint8Array {
  const out = new Uint8Array(size);
  let x = seed * 2654435761;
  for (let i = 0; i < size; i++) {
    x = (x * 1103515245 + 12345) >>> 0;
    out[i] = x >>> 24;
  }
  return out;
}

describe("messages spanning socket reads", () => {
  it("the parser is patched in this process (connectNats installs it)", () => {
    expect(preallocateSpanningMessages()).toBe(true);
    expect(Parser.prototype.parse.name).toBe("parseIntoWholeMessage");
    // and large payloads are written as they are (the tests below publish them mixed with small ones, in one flush)
    expect(writeLargePayloadsInPlace()).toBe(true);
    expect((ProtocolHandler.prototype as unknown as { flushPending: () => void }).flushPending.name).toBe("flushPendingInPlace");
  });

  it("both patches report themselves active, in the log's terms and as stt_nats_patch_active", async () => {
    expect(installNatsPatches()).toEqual({ parser: true, writer: true });
    const gauge = (await natsPatchActive.get()).values;
    expect(gauge.map((v) => [v.labels.patch, v.value]).sort()).toEqual([["parser", 1], ["writer", 1]]);
  });

  it("the patched paths run on a real connection: the writer's in-place flush and the parser's whole-message buffer each count", async () => {
    // Renamed internals (as a minor release could bring) leave nats.js's own path running
    // and every message intact: only these counters tell whether the patches do anything.
    const runs = async (patch: string) => (await natsPatchRuns.get()).values.find((v) => v.labels.patch === patch)?.value ?? 0;
    const [writerBefore, parserBefore] = [await runs("writer"), await runs("parser")];
    const subject = `${nats.topology.prefix}.large.counted`;
    const sub = nats.nc.subscribe(subject, { max: 3 });
    const got: Uint8Array[] = [];
    const done = (async () => {
      for await (const m of sub) got.push(m.data);
    })();
    // one flush: a small piece, a large one (written as it is), a small one
    nats.nc.publish(subject, payload(100, 1));
    nats.nc.publish(subject, payload(300_000, 2));
    nats.nc.publish(subject, payload(100, 3));
    await nats.nc.flush();
    await done;
    expect(got.map((d, i) => Buffer.from(d).equals(Buffer.from(payload(d.length, i + 1))))).toEqual([true, true, true]);
    expect(await runs("writer"), "the writer's in-place path never ran").toBeGreaterThan(writerBefore);
    expect(await runs("parser"), "the parser's whole-message path never ran").toBeGreaterThan(parserBefore);
  });

  it("arrive intact over core NATS, with and without headers, back to back", async () => {
    const subject = `${nats.topology.prefix}.large.core`;
    const received: { data: Uint8Array; seed: string }[] = [];
    const sub = nats.nc.subscribe(subject);
    const done = (async () => {
      for await (const m of sub) {
        received.push({ data: m.data, seed: m.headers?.get("seed") ?? "" });
        if (received.length === SIZES.length * 2) break;
      }
    })();
    SIZES.forEach((size, i) => {
      nats.nc.publish(subject, payload(size, i));
      const h = headers();
      h.set("seed", String(i));
      nats.nc.publish(subject, payload(size, 100 + i), { headers: h });
    });
    await done;
    SIZES.forEach((size, i) => {
      expect(Buffer.from(received[2 * i]!.data).equals(Buffer.from(payload(size, i))), `core ${size} B`).toBe(true);
      expect(received[2 * i + 1]!.seed).toBe(String(i));
      expect(Buffer.from(received[2 * i + 1]!.data).equals(Buffer.from(payload(size, 100 + i))), `core ${size} B with headers`).toBe(true);
    });
  });

  it("arrive intact through a JetStream consumer", async () => {
    const stream = nats.topology.streams.rtAudio.name;
    const subject = nats.topology.subjects.rtAudio(0, "large");
    for (const [i, size] of SIZES.entries()) await nats.js.publish(subject, payload(size, 200 + i), { msgID: `large-${i}` });
    await nats.jsm.consumers.add(stream, { durable_name: "large", filter_subject: subject });
    const consumer = await nats.js.consumers.get(stream, "large");
    const messages = await consumer.consume({ max_bytes: 4 * 1024 * 1024 });
    let n = 0;
    for await (const m of messages) {
      expect(Buffer.from(m.data).equals(Buffer.from(payload(SIZES[n]!, 200 + n))), `JetStream ${SIZES[n]} B`).toBe(true);
      m.ack();
      if (++n === SIZES.length) break;
    }
    await messages.close();
    expect(n).toBe(SIZES.length);
  });

  it("a released message's buffer carries a later message, byte for byte, and only then", async () => {
    const subject = `${nats.topology.prefix}.large.reuse`;
    const sub = nats.nc.subscribe(subject);
    const it = sub[Symbol.asyncIterator]();
    const next = async () => (await it.next()).value!;
    // held (not released): the next message gets a buffer of its own
    nats.nc.publish(subject, payload(200_000, 1));
    const held = await next();
    nats.nc.publish(subject, payload(190_000, 2));
    const second = await next();
    expect(second.data.buffer).not.toBe(held.data.buffer);
    expect(Buffer.from(held.data).equals(Buffer.from(payload(200_000, 1)))).toBe(true);
    // released: a message of the same 64 KiB step is read into it, intact
    const buffer = second.data.buffer;
    releaseMessageData(second.data);
    releaseMessageData(second.data); // twice is once
    const h = headers();
    h.set("seed", "3");
    nats.nc.publish(subject, payload(180_000, 3), { headers: h });
    const third = await next();
    expect(third.data.buffer).toBe(buffer);
    expect(third.headers?.get("seed")).toBe("3");
    expect(Buffer.from(third.data).equals(Buffer.from(payload(180_000, 3)))).toBe(true);
    // the pool had one buffer: the next message needs a new one
    nats.nc.publish(subject, payload(180_000, 4));
    const fourth = await next();
    expect(fourth.data.buffer).not.toBe(buffer);
    expect(Buffer.from(fourth.data).equals(Buffer.from(payload(180_000, 4)))).toBe(true);
    // data that did not come from the pool (a small message, a view of the read) is ignored
    nats.nc.publish(subject, payload(1_000, 5));
    const small = await next();
    releaseMessageData(small.data);
    nats.nc.publish(subject, payload(1_000, 6));
    expect(Buffer.from((await next()).data).equals(Buffer.from(payload(1_000, 6)))).toBe(true);
    sub.unsubscribe();
  });
});
