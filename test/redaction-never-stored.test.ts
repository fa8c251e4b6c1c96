import { readFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { fixturePath } from "./support/fixtures";
import { randomHex, readBody, serveAudio, startHttp, submitJob, waitForJobEnd, type LocalHttp } from "./support/jobs-helpers";
import { connectRt, fixture, silence, streamPcm, wsUrl } from "./support/realtime-support";
import { startServiceProcess, type ServiceProcess } from "./support/service-process";
import { startStack, type Stack } from "./support/stack";
import { searchStores, walk } from "./support/store-search";
import { startProviderServer, type ProviderServer } from "./support/workers-provider-server";

/**
 * Issue 27: with `redact=pci` the raw card number is never stored. The engine is an
 * external OpenAI-compatible provider (a real local HTTP server) whose transcript holds
 * a card number, so every plane gets digits to redact whatever the audio says. All
 * planes' work runs in a child `stt serve` whose output (debug logs) is captured; then
 * every message of every stream of the test's prefix, every text column of its schema,
 * every file of its object store, the webhook bodies and the logs are searched for the
 * digits. Only the in-process stack's projector and key route run here.
 */
const CARD = "4111 1111 1111 1111";
const TRANSCRIPT = `please charge my card ${CARD} thank you`;
/** The card's digits as any store might hold them: grouped, joined, dashed. */
const RAW = [/4111\D?1111\D?1111\D?1111/, /1111 1111/, /41111111/];

let stack: Stack;
let child: ServiceProcess;
let provider: ProviderServer;
let audio: LocalHttp;
let hooks: LocalHttp;
const hookBodies: string[] = [];
let key: string;
const CLIP = readFileSync(fixturePath("jfk.wav"));

beforeAll(async () => {
  provider = await startProviderServer("card-engine");
  provider.behaviour.transcript = TRANSCRIPT;
  audio = await serveAudio(new Uint8Array(CLIP));
  hooks = await startHttp(async (req, res) => {
    hookBodies.push((await readBody(req)).toString());
    res.writeHead(200).end();
  });
  // the engine answers the one transcript to every request: a clip is one request, never
  // split into pieces that would each carry the card number
  const engine = { WORKER_EMBEDDED: "none", WORKER_OPENAI_URL: provider.url, WORKER_HEARTBEAT_MS: "500", SEGMENT_SPLIT_MIN_SECONDS: "600" };
  stack = await startStack({ ...engine, STT_SERVICES: "projector,http-gateway" });
  child = await startServiceProcess(
    stack,
    "transcriber,http-gateway,vad,rt-transcriber,jobs-manager,jobs-fetcher,jobs-slicer,jobs-transcriber,jobs-aggregator,jobs-reviewer,webhooks,realtime-gateway",
    { ...engine, LOG_LEVEL: "debug", OBJECT_STORE: "fs", OBJECT_STORE_DIR: stack.config.objects.dir, JOB_ALLOW_PRIVATE_URLS: "true" },
  );
  key = (await stack.issueKey("pro", `redact-${randomHex()}`)).key;
}, 180_000);

afterAll(async () => {
  await child?.stop();
  await stack?.stop();
  await Promise.all([provider?.close(), audio?.stop(), hooks?.stop()]);
});

const base = () => `http://127.0.0.1:${child.port}`;
const bearer = () => ({ authorization: `Bearer ${key}` });
const leaks = (text: string) => RAW.filter((r) => r.test(text)).map(String);
const search = () => searchStores(stack, leaks, { logs: [child.output()], webhook: hookBodies });


async function segment(fields: Record<string, string>): Promise<string> {
  const form = new FormData();
  form.set("file", new Blob([new Uint8Array(CLIP)]), "clip.wav");
  for (const [k, v] of Object.entries(fields)) form.set(k, v);
  const res = await fetch(`${base()}/v1/audio/transcriptions`, { method: "POST", body: form, headers: bearer() });
  expect(res.status).toBe(200);
  return res.text();
}

describe("redact=pci: the raw card number is never stored", () => {
  it("the engine really says the digits (without redaction the answer carries them)", { timeout: 60_000 }, async () => {
    // this answer is the control: it is not stored either (the segment plane stores no text)
    expect(leaks(await segment({ response_format: "json" }))).not.toEqual([]);
  });

  it("segment plane: json, verbose_json (words carry the entity), srt, vtt, stream", { timeout: 60_000 }, async () => {
    const verbose = JSON.parse(await segment({ response_format: "verbose_json", redact: "pci" }));
    expect(verbose.text).toContain("[CARD_NUMBER]");
    expect(verbose.words.filter((w: { entity?: string }) => w.entity === "CARD_NUMBER").length).toBe(4);
    for (const format of ["json", "srt", "vtt", "text"]) {
      const body = await segment({ response_format: format, redact: "pci" });
      expect(body).toContain("[CARD_NUMBER]");
      expect(leaks(body)).toEqual([]);
    }
    expect(leaks(await segment({ stream: "true", redact: "pci" }))).toEqual([]);
  });

  it("refuses an unknown value with the documented envelope", async () => {
    const form = new FormData();
    form.set("file", new Blob([new Uint8Array(CLIP)]), "clip.wav");
    form.set("redact", "pci,cards");
    const res = await fetch(`${base()}/v1/audio/transcriptions`, { method: "POST", body: form, headers: bearer() });
    expect(res.status).toBe(400);
    expect(await res.json()).toMatchObject({ error: { code: "invalid_request", param: "redact" } });
    const job = await fetch(`${base()}/v1/audio/transcriptions/jobs`, { method: "POST", headers: { ...bearer(), "content-type": "application/json" }, body: JSON.stringify({ audio_url: `${audio.url}/a.wav`, redact: ["ssn", "x"] }) });
    expect(job.status).toBe(400);
    expect(JSON.stringify(await job.json())).toContain("redact must be one or more of pci, ssn, phone, email, numbers, pii");
  });

  it("batch job: result, artifacts and webhook redacted; redact_audio silences the spans", { timeout: 180_000 }, async () => {
    const { status, workflowId } = await submitJob((p, i) => fetch(base() + p, i), key, {
      audio_url: `${audio.url}/speech.wav`,
      redact: "pci",
      redact_audio: true,
      segment_seconds: 5,
      webhook_url: `${hooks.url}/hook`,
    });
    expect(status).toBe(202);
    const view = await waitForJobEnd((p, i) => fetch(base() + p, i), key, workflowId, { timeoutMs: 150_000 });
    expect(view.status).toBe("complete");
    // the finished job's view carries result.json
    const result = JSON.stringify(view);
    expect(result).toContain("[CARD_NUMBER]");
    expect(leaks(result)).toEqual([]);
    const until = Date.now() + 30_000;
    while (hookBodies.length === 0 && Date.now() < until) await new Promise((r) => setTimeout(r, 200));
    expect(hookBodies.length).toBeGreaterThan(0);
    for (const b of hookBodies) expect(leaks(b)).toEqual([]);
    // redact_audio: the job's audio with each card number's time silenced, the rest kept
    const wavPath = walk(stack.config.objects.dir).find((f) => f.endsWith("redacted_audio.wav"));
    expect(wavPath).toMatch(/redacted_audio\.wav$/);
    const wav = readFileSync(wavPath!);
    const pcm = new Int16Array(wav.buffer, wav.byteOffset + 44, (wav.length - 44) / 2);
    const chunk0 = JSON.parse(readFileSync(wavPath!.replace("redacted_audio.wav", "chunk_0.json"), "utf8"));
    expect(chunk0.redacted_spans.length).toBeGreaterThan(0);
    const span = chunk0.redacted_spans[0];
    expect(span.entity).toBe("CARD_NUMBER");
    const inside = pcm.subarray(Math.ceil(span.start_time * 16000), Math.floor(span.end_time * 16000));
    expect(inside.length).toBeGreaterThan(1000);
    expect(inside.every((x) => x === 0)).toBe(true);
    expect(pcm.some((x) => Math.abs(x) > 1000)).toBe(true);
    const bad = await fetch(`${base()}/v1/audio/transcriptions/jobs`, { method: "POST", headers: { ...bearer(), "content-type": "application/json" }, body: JSON.stringify({ audio_url: `${audio.url}/a.wav`, redact_audio: true }) });
    expect(bad.status).toBe(400);
    expect(await bad.json()).toMatchObject({ error: { param: "redact_audio" } });
  });

  it("realtime (native door, session.update redact): completed and deltas redacted", { timeout: 120_000 }, async () => {
    const c = await connectRt(wsUrl(base()), bearer());
    await c.next("session.created");
    c.sendJson({ type: "session.update", session: { input_audio_transcription: { redact: "pci" } } });
    expect((await c.next("session.updated")).session.input_audio_transcription).toMatchObject({ redact: ["pci"] });
    await streamPcm(c, fixture("jfk.wav"), { speed: 4 });
    await streamPcm(c, silence(1.5), { speed: 4 });
    const done = await c.next("conversation.item.input_audio_transcription.completed", 90_000);
    expect(done.transcript).toContain("[CARD_NUMBER]");
    for (const e of c.events) expect(leaks(JSON.stringify(e))).toEqual([]);
    c.ws.close();
  });

  it("no stream, table, object or log line holds the digits", { timeout: 120_000 }, async () => {
    // let the projections and the realtime usage settle
    await new Promise((r) => setTimeout(r, 2000));
    const { found, messages, columns, files } = await search();
    expect(messages).toBeGreaterThan(10);
    expect(columns).toBeGreaterThan(5);
    expect(files.some((f) => f.endsWith("result.json"))).toBe(true);
    expect(child.output().length).toBeGreaterThan(100);
    expect(found).toEqual([]);
    console.log(`searched ${messages} stream messages, ${columns} text columns, ${files.length} objects, ${child.output().length} bytes of logs, ${hookBodies.length} webhook bodies: no raw digits`);
  });

  it("control: the same search finds the digits once a job runs without redaction", { timeout: 180_000 }, async () => {
    const { workflowId } = await submitJob((p, i) => fetch(base() + p, i), key, { audio_url: `${audio.url}/plain.wav`, segment_seconds: 5 });
    expect((await waitForJobEnd((p, i) => fetch(base() + p, i), key, workflowId, { timeoutMs: 150_000 })).status).toBe("complete");
    const { found } = await search();
    expect(found.some((f) => f.includes(workflowId) || /chunk_\d+\.json|result\.json/.test(f))).toBe(true);
  });
});
