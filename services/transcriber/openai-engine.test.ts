import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { createOpenAIEngine } from "./openai-engine";

/**
 * A real local server whose /v1/models answers 200, 503 or nothing, as told, and that
 * tells each probe the engine gave up on (its connection closed unanswered) and each 503
 * it sent as they happen: the test follows the probes themselves, not the clock.
 */
async function modelsServer() {
  const state = { mode: "ok" as "ok" | "loading" | "silent" };
  const seen = { abandoned: 0, unavailable: 0 };
  const listeners = new Set<() => void>();
  const changed = () => listeners.forEach((l) => l());
  const server: Server = createServer((req, res) => {
    if (state.mode === "silent") {
      // never answers: the engine's probe times out and closes the connection
      res.on("close", () => {
        seen.abandoned++;
        changed();
      });
      return;
    }
    res.writeHead(state.mode === "ok" ? 200 : 503, { "content-type": "application/json" });
    res.end(JSON.stringify({ object: "list", data: [] }));
    if (state.mode === "loading") {
      seen.unavailable++;
      changed();
    }
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    state,
    seen,
    /** Calls `check` on every probe the server sees abandoned or answered 503. */
    onProbe: (check: () => void) => listeners.add(check),
    stop: () => (server.closeAllConnections(), new Promise((r) => server.close(r))),
  };
}

/** Polls until `ok()` (a generous cap: a loaded machine is slow, not wrong). */
async function until(ok: () => boolean, what: string, timeoutMs = 30_000) {
  const deadline = Date.now() + timeoutMs;
  while (!ok()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

let cleanup: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of cleanup) await c();
  cleanup = [];
});

describe("OpenAI-compatible engine readiness", () => {
  it("a 503 turns it cold at the next probe; unanswered probes only after three in a row", async () => {
    const s = await modelsServer();
    // probes every 1.5 s, each given 0.5 s: one probe is over long before the next starts
    const engine = await createOpenAIEngine({ url: s.url, probeMs: 1500, probeTimeoutMs: 500 });
    cleanup.push(() => engine.close(), s.stop);
    await until(() => engine.warm(), "the first answered probe");

    // Warm as seen when the server notices each abandoned probe (the engine counted the
    // miss before: its timeout rejects the probe, then the connection closes).
    const warmAtMiss: boolean[] = [];
    s.onProbe(() => {
      if (s.seen.abandoned > warmAtMiss.length) warmAtMiss.push(engine.warm());
    });
    s.state.mode = "silent";
    await until(() => s.seen.abandoned >= 3, "three unanswered probes");
    // one or two unanswered: still warm; cold at the third
    expect(warmAtMiss.slice(0, 3)).toEqual([true, true, false]);

    s.state.mode = "ok";
    await until(() => engine.warm(), "warm again at the next answer");

    s.state.mode = "loading";
    await until(() => !engine.warm(), "cold at a 503");
    // at the first one: the next probe is 1.5 s of event loop away
    expect(s.seen.unavailable).toBe(1);
  });
});
