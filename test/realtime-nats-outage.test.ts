import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { NATS_OUTAGE_CLOSE_MS } from "../domain/sessions/close-rules";
import { startPrivateNatsServer, type PrivateNatsServer } from "./support/nats";
import { startStack, type Stack } from "./support/stack";
import { connectRt, silence, streamPcm, wsUrl, type RtClient } from "./support/realtime-support";

/**
 * A NATS outage closes every open realtime session with one code and reason, whatever
 * the session was doing: 1013 upstream_unavailable. The whole service runs in-process
 * on a nats-server of this test's own, which the test kills.
 */
let nats: PrivateNatsServer;
let stack: Stack;
let key: string;

beforeAll(async () => {
  nats = await startPrivateNatsServer();
  stack = await startStack({ NATS_URL: nats.url });
  key = (await stack.issueKey("pro")).key;
}, 120_000);
afterAll(async () => {
  // the stack's teardown deletes its streams: give it a server to talk to; the private
  // server goes in any case, even if a teardown hangs on the machine's load
  await nats?.restart().catch(() => undefined);
  await Promise.race([stack?.stop().catch(() => undefined), new Promise((r) => setTimeout(r, 90_000).unref())]);
  await nats?.destroy();
}, 150_000);

async function keepStreaming(c: RtClient, chunkBytes: number) {
  while (c.ws.readyState === c.ws.OPEN) await streamPcm(c, silence(0.5), { speed: 1, chunkBytes });
}

describe("NATS outage (realtime)", () => {
  it("closes every open session 1013 upstream_unavailable: streaming (acks piling up) or quiet (nothing in flight)", { timeout: 120_000 }, async () => {
    const auth = { authorization: `Bearer ${key}` };
    const open = async () => {
      const c = await connectRt(wsUrl(stack.baseUrl), auth);
      await c.next("session.created");
      return c;
    };
    // 100 ms and 20 ms frames in real time: their batches stop being acked at the outage
    const streaming = await open();
    const fast = await open();
    // audio once, then nothing: no publish in flight to fail
    const quiet = await open();
    await streamPcm(quiet, silence(0.5), { speed: Infinity, chunkBytes: 3200 });
    void keepStreaming(streaming, 3200);
    void keepStreaming(fast, 640);
    await new Promise((r) => setTimeout(r, 1000));
    expect([streaming, fast, quiet].map((c) => c.ws.readyState)).toEqual([1, 1, 1]);

    const t0 = Date.now();
    await nats.stop("SIGKILL");
    const closes = await Promise.all([streaming, fast, quiet].map((c) => c.closed.then((x) => ({ ...x, afterMs: Date.now() - t0 }))));
    console.log(`closes after the nats-server died (100 ms frames, 20 ms frames, quiet): ${closes.map((c) => `${c.code} ${c.reason} ${c.afterMs} ms`).join("; ")}`);
    for (const c of closes) expect({ code: c.code, reason: c.reason }, JSON.stringify(closes)).toEqual({ code: 1013, reason: "upstream_unavailable" });
    // bounded: the quiet one within the outage limit plus a generous margin for a busy machine
    expect(Math.max(...closes.map((c) => c.afterMs)), JSON.stringify(closes)).toBeLessThan(NATS_OUTAGE_CLOSE_MS + 20_000);
  });
});
