import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { createOpenAIEngine } from "./openai-engine";

/** A real local server whose /v1/models answers 200, 503 or nothing, as told. */
async function modelsServer() {
  const state = { mode: "ok" as "ok" | "loading" | "silent" };
  const server: Server = createServer((req, res) => {
    if (state.mode === "silent") return; // never answers
    res.writeHead(state.mode === "ok" ? 200 : 503, { "content-type": "application/json" });
    res.end(JSON.stringify({ object: "list", data: [] }));
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, state, stop: () => (server.closeAllConnections(), new Promise((r) => server.close(r))) };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
let cleanup: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of cleanup) await c();
  cleanup = [];
});

describe("OpenAI-compatible engine readiness", () => {
  it("a 503 turns it cold at the next probe; unanswered probes only after three in a row", async () => {
    const s = await modelsServer();
    // probes every 200 ms, each given 300 ms: after the server falls silent the first
    // probe times out within 500 ms and the third not before 700 ms
    const engine = await createOpenAIEngine({ url: s.url, probeMs: 200, probeTimeoutMs: 300 });
    cleanup.push(() => engine.close(), s.stop);
    expect(engine.warm()).toBe(true);
    s.state.mode = "silent";
    await sleep(560); // one or two probes unanswered
    expect(engine.warm()).toBe(true);
    await sleep(600); // three and more
    expect(engine.warm()).toBe(false);
    s.state.mode = "ok";
    await sleep(500);
    expect(engine.warm()).toBe(true);
    s.state.mode = "loading";
    await sleep(400);
    expect(engine.warm()).toBe(false);
  });
});
