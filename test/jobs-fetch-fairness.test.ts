import { readFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { encodeWav, pcm16MonoFromWav } from "../shared/audio/wav";
import type { JobView } from "../schemas/jobs";
import { fixturePath } from "./support/fixtures";
import { randomHex, startHttp, submitJob, waitFor, waitForJobEnd, type LocalHttp } from "./support/jobs-helpers";
import { startStack, type Stack } from "./support/stack";
import { startProviderServer, type ProviderServer } from "./support/workers-provider-server";

/**
 * Bounded cost of batch fetches on the real stack (issue 23 item 4): fetch slots shared
 * across owners, a minimum transfer rate, DELETE closing the download in flight, errors
 * naming the failing redirect hop, and the 100-slice cap. The audio origins are real
 * local HTTP servers: `trickle` sends 2,000 bytes/s (above the stack's minimum rate, so
 * only a DELETE or the 300 s deadline ends it), `drip` 1 byte/s.
 */
const SPEECH = readFileSync(fixturePath("silero_test.wav"));
const speechPcm = pcm16MonoFromWav(SPEECH)!;
// 180 s: the 60 s fixture three times
const LONG = encodeWav(Int16Array.from([...speechPcm, ...speechPcm, ...speechPcm]));
const JOBS = "/v1/audio/transcriptions/jobs";

interface Origin extends LocalHttp {
  /** Open trickle/drip connections by name. */
  open: Set<string>;
  /** Most trickle connections ever open at once. */
  maxOpenTrickles: number;
  /** When each trickle/drip connection closed (ms since epoch), by name. */
  closedAt: Map<string, number>;
  /** Requests seen per path. */
  hits: Map<string, number>;
}

async function startOrigin(): Promise<Origin> {
  const open = new Set<string>();
  const closedAt = new Map<string, number>();
  const hits = new Map<string, number>();
  let trickles = 0;
  const origin = await startHttp((req, res) => {
    const url = new URL(req.url ?? "/", "http://x");
    hits.set(url.pathname, (hits.get(url.pathname) ?? 0) + 1);
    const [, kind, name] = url.pathname.split("/");
    if (kind === "trickle" || kind === "drip") {
      res.writeHead(200, { "content-type": "audio/wav" });
      open.add(name!);
      if (kind === "trickle") origin2.maxOpenTrickles = Math.max(origin2.maxOpenTrickles, ++trickles);
      // trickle: 200 bytes every 100 ms; drip: one byte a second
      const timer = kind === "trickle" ? setInterval(() => res.write(SPEECH.subarray(0, 200)), 100) : setInterval(() => res.write("x"), 1000);
      res.on("close", () => {
        clearInterval(timer);
        open.delete(name!);
        if (kind === "trickle") trickles--;
        closedAt.set(name!, Date.now());
      });
      return;
    }
    if (url.pathname === "/speech.wav") return res.writeHead(200, { "content-type": "audio/wav" }).end(SPEECH);
    if (url.pathname === "/long.wav") return res.writeHead(200, { "content-type": "audio/wav" }).end(LONG);
    if (url.pathname === "/redirect") return res.writeHead(302, { location: url.searchParams.get("to")! }).end();
    res.writeHead(404).end();
  });
  const origin2: Origin = Object.assign(origin, { open, maxOpenTrickles: 0, closedAt, hits });
  return origin2;
}

let stack: Stack;
let origin: Origin;
let provider: ProviderServer;

beforeAll(async () => {
  origin = await startOrigin();
  provider = await startProviderServer("fair");
  stack = await startStack({
    WORKER_EMBEDDED: "none",
    WORKER_OPENAI_URL: provider.url,
    WORKER_HEARTBEAT_MS: "500",
    // the old per-replica bound of 2, so one owner could take every slot without the share
    JOB_FETCH_CONCURRENCY: "2",
    JOB_FETCH_TIMEOUT_MS: "300000",
    JOB_FETCH_MIN_BYTES_PER_SECOND: "100",
    JOB_FETCH_MIN_RATE_WINDOW_MS: "3000",
  });
});

afterAll(async () => {
  await stack?.stop();
  await origin?.stop();
  await provider?.close();
});

const auth = (key: string) => ({ authorization: `Bearer ${key}`, "content-type": "application/json" });
const poll = async (key: string, id: string) => (await (await stack.fetch(`${JOBS}/${id}`, { headers: auth(key) })).json()) as JobView;
const step = (view: JobView, name: string) => view.steps.find((s) => s.name === name);
async function submit(key: string, body: Record<string, unknown>): Promise<string> {
  const { status, workflowId } = await submitJob(stack.fetch, key, body);
  expect(status).toBe(202);
  return workflowId;
}

describe("batch fetch slots and cancel", () => {
  it("one owner's slow downloads never hold every slot: another owner's job is fetched at once; DELETE closes each download", { timeout: 300_000 }, async () => {
    const a = (await stack.issueKey("pro", `slow-owner-${randomHex()}`)).key;
    const b = (await stack.issueKey("pro", `other-owner-${randomHex()}`)).key;
    const run = randomHex();
    const names = [`a1-${run}`, `a2-${run}`];
    const ids = new Map<string, string>();
    for (const name of names) ids.set(name, await submit(a, { audio_url: `${origin.url}/trickle/${name}` }));
    // one download runs; the other's command is out (its fetch step started) and finds the owner's share taken
    await waitFor(async () => names.some((n) => origin.open.has(n)), { timeoutMs: 60_000, what: "a first trickle download" });
    await waitFor(async () => (await Promise.all(names.map(async (n) => step(await poll(a, ids.get(n)!), "fetch")))).every(Boolean), { what: "both fetch steps started" });

    const bId = await submit(b, { audio_url: `${origin.url}/speech.wav`, segment_seconds: 30 });
    const fetched = await waitFor(
      async () => {
        const view = await poll(b, bId);
        return step(view, "fetch")?.status === "complete" ? view : undefined;
      },
      // the trickles run for up to 300 s: without the share, b would wait for one of them
      { timeoutMs: 60_000, what: "the other owner's audio to be fetched" },
    );
    const waitedMs = Date.parse(step(fetched, "fetch")!.ended_at!) - Date.parse(fetched.created_at);
    console.log(`other owner's fetch finished ${waitedMs} ms after submission, with owner a's downloads running`);
    expect(names.some((n) => origin.open.has(n))).toBe(true);
    expect(origin.maxOpenTrickles).toBe(1);

    // DELETE closes the download in flight, then the owner's other job gets the slot; cancel that too
    for (let i = 0; i < 2; i++) {
      const name = await waitFor(async () => names.find((n) => origin.open.has(n) && !origin.closedAt.has(n)), { timeoutMs: 90_000, what: `trickle download ${i + 1}` });
      const deletedAt = Date.now();
      const res = await stack.fetch(`${JOBS}/${ids.get(name)}`, { method: "DELETE", headers: auth(a) });
      expect(res.status).toBe(200);
      // the deadline is 300 s and the trickle is above the minimum rate: only the cancel closes it
      await waitFor(async () => origin.closedAt.has(name), { timeoutMs: 30_000, what: `the origin to see ${name} closed` });
      console.log(`DELETE → origin saw the connection closed in ${origin.closedAt.get(name)! - deletedAt} ms`);
    }
    for (const name of names) {
      const view = await waitFor(async () => {
        const v = await poll(a, ids.get(name)!);
        return v.status === "terminated" ? v : undefined;
      }, { what: `${name} terminated` });
      // the aborted download recorded no failure
      expect(step(view, "fetch")).toMatchObject({ status: "running", error: null });
      expect(origin.hits.get(`/trickle/${name}`)).toBe(1);
    }
    expect(origin.maxOpenTrickles).toBe(1);
    expect((await waitForJobEnd(stack.fetch, b, bId, { timeoutMs: 120_000 })).status).toBe("complete");
  });

  it("a download below the minimum rate fails the job with fetch_too_slow on its first attempt", { timeout: 120_000 }, async () => {
    const key = (await stack.issueKey("pro", `drip-owner-${randomHex()}`)).key;
    const name = `c-${randomHex()}`;
    const id = await submit(key, { audio_url: `${origin.url}/drip/${name}?token=secret` });
    const view = await waitForJobEnd(stack.fetch, key, id, { timeoutMs: 90_000 });
    expect(view.status).toBe("errored");
    expect(view.error?.code).toBe("fetch_too_slow");
    expect(view.error?.message).toContain(`${origin.url}/drip/${name} sent`);
    expect(view.error?.message).not.toContain("secret");
    expect(step(view, "fetch")).toMatchObject({ status: "errored", attempt: 1 });
    // not retried: one connection, closed by us
    expect(origin.hits.get(`/drip/${name}`)).toBe(1);
    await waitFor(async () => origin.closedAt.has(name), { timeoutMs: 30_000, what: "the drip connection to close" });
  });

  it("an error after a redirect names the hop that failed", { timeout: 120_000 }, async () => {
    const key = (await stack.issueKey("pro", `redirect-owner-${randomHex()}`)).key;
    const id = await submit(key, { audio_url: `${origin.url}/redirect?to=${encodeURIComponent("/moved/missing.wav")}` });
    const view = await waitForJobEnd(stack.fetch, key, id);
    expect(view.error).toEqual({ code: "audio_not_found", message: `${origin.url}/moved/missing.wav (redirected from ${origin.url}/redirect) answered 404` });
  });
});

describe("slice cap on the real stack", () => {
  it("segment_seconds: 1 on 180 s of audio makes 100 slices of 1.8 s, shown in the poll view", { timeout: 300_000 }, async () => {
    const key = (await stack.issueKey("pro", `cap-owner-${randomHex()}`)).key;
    const before = provider.requests.length;
    const id = await submit(key, { audio_url: `${origin.url}/long.wav`, segment_seconds: 1, concurrency: 32 });
    const view = await waitForJobEnd(stack.fetch, key, id, { timeoutMs: 240_000 });
    expect(view.status).toBe("complete");
    expect(view.slicing).toEqual({ requested_segment_seconds: 1, segment_seconds: 1.8, max_chunks: 100, chunk_count: 100 });
    expect(view.steps.filter((s) => s.name.startsWith("transcribe_chunk_"))).toHaveLength(100);
    expect(view.output?.result.metadata.chunk_count).toBe(100);
    // every slice goes to the engine but those of the recording's pauses without speech,
    // answered with no words without it (shared/audio/speech-gate.ts)
    const asked = provider.requests.length - before;
    expect(asked).toBeLessThanOrEqual(100);
    expect(asked).toBeGreaterThanOrEqual(90);
  });

  it("segment_seconds above 600 is lowered to 600 (a slice's PCM is held by its step): 180 s makes one slice", { timeout: 300_000 }, async () => {
    const key = (await stack.issueKey("pro", `max-seg-owner-${randomHex()}`)).key;
    const id = await submit(key, { audio_url: `${origin.url}/long.wav`, segment_seconds: 14_400 });
    const view = await waitForJobEnd(stack.fetch, key, id, { timeoutMs: 240_000 });
    expect(view.status).toBe("complete");
    expect(view.slicing?.requested_segment_seconds).toBe(600);
    expect(view.slicing?.chunk_count).toBe(1);
  });
});
