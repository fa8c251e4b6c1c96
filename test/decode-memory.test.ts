import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { fixturePath } from "./support/fixtures";
import { fixture } from "./support/realtime-support";
import { startHttp, waitFor, type LocalHttp } from "./support/jobs-helpers";
import { issueKeyAt, startOwnService, type OwnService } from "./support/service-process";
import { startStack, type Stack } from "./support/stack";
import { startProviderServer, type ProviderServer } from "./support/workers-provider-server";

/**
 * Tiny uploads must not buy huge memory (issue 23, item 3). A 2.7 MB FLAC of four
 * hours of silence is 461 MB of decoded PCM, which a pro key may send. On the real
 * service (a child `stt serve`, so the serving process's own RSS is what is measured):
 * three such clips from three keys at once are held within DECODE_MEMORY_MAX_MB (the
 * default, 1024 MiB: two clips), the third is refused 503 `server_busy` with
 * Retry-After before it is decoded and answered correctly when retried, and a normal
 * clip is answered meanwhile.
 *
 * The worker is a real local HTTP server (OpenAI-compatible) that streams the upload,
 * counts the samples and the non-zero bytes it got, and holds its answer for long clips
 * until the test lets go, so the two admitted clips are in memory together.
 */

const FOUR_HOURS = 14_400;
const SAMPLES = FOUR_HOURS * 16_000;
const LIMIT_MIB = 1024; // DECODE_MEMORY_MAX_MB's default: the test runs with it
/** Above the bound: the upload bytes and form copies of the requests, and heap the collector has not returned yet. */
const SLACK_MIB = 256;
const JFK = readFileSync(fixturePath("jfk.wav"));
/** The non-zero bytes of jfk.wav's samples: all a long clip's are (jfk.wav, then silence). */
const JFK_PCM = fixture("jfk.wav");
const JFK_NONZERO = Buffer.from(JFK_PCM.buffer, JFK_PCM.byteOffset, JFK_PCM.byteLength).reduce((n, b) => n + (b !== 0 ? 1 : 0), 0);

interface Received {
  samples: number;
  nonZeroBytes: number;
}

/** An OpenAI-compatible server that reads the upload as a stream (it never holds it) and answers with what it counted. */
function startCountingProvider(gate: Promise<void>, received: Received[]): Promise<LocalHttp> {
  const zeros = Buffer.alloc(1 << 20);
  return startHttp((req, res) => {
    const send = (payload: unknown) => {
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify(payload));
    };
    if (req.method === "GET") return send({ object: "list", data: [{ id: "whisper-1", object: "model" }] });
    const boundary = /boundary=(\S+)/.exec(req.headers["content-type"] ?? "")?.[1] ?? "";
    const tailBytes = Buffer.byteLength(`\r\n--${boundary}--\r\n`);
    let head: Buffer | undefined = Buffer.alloc(0);
    let bytes = 0;
    let nonZero = 0;
    const count = (chunk: Buffer) => {
      bytes += chunk.length;
      for (let at = 0; at < chunk.length; at += zeros.length) {
        const piece = chunk.subarray(at, at + zeros.length);
        if (piece.equals(zeros.subarray(0, piece.length))) continue;
        for (const b of piece) if (b !== 0) nonZero++;
      }
    };
    req.on("data", (chunk: Buffer) => {
      if (!head) return count(chunk);
      head = Buffer.concat([head, chunk]);
      const riff = head.indexOf("RIFF");
      if (riff < 0 || head.length < riff + 44) return;
      const rest = head.subarray(riff + 44);
      head = undefined;
      count(rest);
    });
    req.on("end", async () => {
      // The closing boundary is counted with the data: every byte of it is non-zero.
      const got = { samples: (bytes - tailBytes) / 2, nonZeroBytes: nonZero - tailBytes };
      received.push(got);
      if (got.samples > 1_000_000) await gate;
      const duration = got.samples / 16_000;
      const text = `${got.samples} samples ${got.nonZeroBytes} nonzero`;
      send({ task: "transcribe", language: "english", duration, text, segments: [{ id: 0, start: 0, end: duration, text }], words: [] });
    });
  });
}

/** Resident set of `pid` now and at its peak (VmHWM), in MiB. */
function memoryOf(pid: number): { rss: number; peak: number } {
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  const kib = (name: string) => Number(new RegExp(`^${name}:\\s+(\\d+) kB`, "m").exec(status)![1]);
  return { rss: kib("VmRSS") / 1024, peak: kib("VmHWM") / 1024 };
}

describe("decoded audio is bounded per process", () => {
  let dir: string;
  let flac: Buffer;
  let provider: LocalHttp;
  let own: OwnService;
  let keys: string[];
  let letGo!: () => void;
  const gate = new Promise<void>((r) => (letGo = r));
  const received: Received[] = [];

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), "stt-decode-memory-"));
    // jfk.wav, then silence to four hours: speech, so the engine is asked (a clip of
    // silence alone is answered without it, shared/audio/speech-gate.ts), and small as FLAC
    const path = join(dir, "long.flac");
    execFileSync("ffmpeg", ["-v", "error", "-i", fixturePath("jfk.wav"), "-f", "lavfi", "-i", "anullsrc=r=16000:cl=mono", "-filter_complex", "[0:a][1:a]concat=n=2:v=0:a=1", "-t", String(FOUR_HOURS), "-c:a", "flac", "-y", path]);
    flac = readFileSync(path);
    provider = await startCountingProvider(gate, received);
    own = await startOwnService(
      // Whole clips at the worker (splitting off: a 4-hour clip would go as 100 pieces),
      // so the two admitted clips wait there together, each held whole in this process.
      { NATS_URL: process.env.NATS_URL ?? "nats://127.0.0.1:4222", WORKER_EMBEDDED: "none", WORKER_OPENAI_URL: provider.url, WORKER_HEARTBEAT_MS: "500", SEGMENT_SPLIT_MIN_SECONDS: "100000" },
      { owner: "decode-memory", timeoutMs: 90_000 },
    );
    keys = [own.key];
    for (let i = 1; i < 3; i++) keys.push(await issueKeyAt(own.baseUrl, own.adminToken, `tenant-memory-${i}`));
  }, 120_000);
  afterAll(async () => {
    letGo?.();
    await own?.stop();
    await provider?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  const post = async (bytes: Uint8Array, name: string, key: string) => {
    const form = new FormData();
    form.set("file", new Blob([new Uint8Array(bytes)]), name);
    form.set("response_format", "verbose_json");
    form.set("smart_format", "false");
    const res = await fetch(`${own.baseUrl}/v1/audio/transcriptions`, { method: "POST", body: form, headers: { authorization: `Bearer ${key}` } });
    return { res, body: (await res.json()) as any };
  };

  it("holds two 4-hour clips, refuses the third with 503 server_busy, and answers all of them and a normal clip correctly", async () => {
    // Warm: the worker announced, every code path loaded; then the peak is measured from here.
    await waitFor(async () => (await post(JFK, "jfk.wav", keys[0]!)).res.status === 200, { timeoutMs: 60_000, what: "a normal clip answered" });
    const pid = own.service.proc.pid!;
    writeFileSync(`/proc/${pid}/clear_refs`, "5"); // resets VmHWM to the RSS now
    const baseline = memoryOf(pid).rss;

    const long = keys.map((key) => post(flac, "long.flac", key));
    const refused = await Promise.race(long.map((p, i) => p.then((r) => ({ ...r, i }))));
    expect(refused.res.status).toBe(503);
    expect(refused.body.error.code).toBe("server_busy");
    expect(refused.res.headers.get("retry-after")).toBe("5");
    // Refused from the probe's length, before decoding: it cost no PCM.
    expect(refused.res.headers.get("server-timing") ?? "").not.toMatch(/decode/);

    // The two admitted clips reach the worker whole and wait there, held in memory together.
    await waitFor(async () => received.filter((r) => r.samples > 1_000_000).length === 2, { timeoutMs: 240_000, what: "two long clips at the worker" });
    const normal = await post(JFK, "jfk.wav", keys[refused.i]!);
    expect(normal.res.status).toBe(200);
    expect(normal.body.duration).toBeCloseTo(11, 0); // jfk.wav: 11 s of speech
    expect(normal.body.text).toMatch(new RegExp(`^${Math.round(normal.body.duration * 16_000)} samples [1-9]\\d* nonzero$`));
    letGo();

    for (const [i, p] of long.entries()) {
      if (i === refused.i) continue;
      const { res, body } = await p;
      expect(res.status).toBe(200);
      expect(body.duration).toBe(FOUR_HOURS);
      expect(body.text).toBe(`${SAMPLES} samples ${JFK_NONZERO} nonzero`);
    }
    const { peak } = memoryOf(pid);
    console.log(`decode-memory: baseline ${baseline.toFixed(0)} MiB, peak ${peak.toFixed(0)} MiB (+${(peak - baseline).toFixed(0)}), bound ${LIMIT_MIB} MiB`);
    // Without the bound the three decodes alone took ~2.7 GB (each held its PCM twice).
    expect(peak - baseline).toBeLessThan(LIMIT_MIB + SLACK_MIB);

    // The refused client retries after Retry-After and is answered in full.
    const retried = await waitFor(
      async () => {
        const r = await post(flac, "long.flac", keys[refused.i]!);
        return r.res.status === 503 ? undefined : r;
      },
      { timeoutMs: 240_000, everyMs: 5_000, what: "the refused clip answered on retry" },
    );
    expect(retried.res.status).toBe(200);
    expect(retried.body.text).toBe(`${SAMPLES} samples ${JFK_NONZERO} nonzero`);
  }, 600_000);
});

/** `seconds` of quiet tone as MP3: from a file (Xing header: a stated length) or a pipe (no header: a bitrate guess). */
function mp3(seconds: number, how: "file" | "pipe"): Buffer {
  const src = ["-v", "error", "-f", "lavfi", "-i", "sine=f=220:r=8000,volume=0.1", "-t", String(seconds), "-ac", "1", "-b:a", "8k", "-f", "mp3"];
  if (how === "pipe") return execFileSync("ffmpeg", [...src, "pipe:1"], { maxBuffer: 1 << 26 });
  const dir = mkdtempSync(join(tmpdir(), "stt-decode-memory-mp3-"));
  try {
    execFileSync("ffmpeg", [...src, "-y", join(dir, "a.mp3")]);
    return readFileSync(join(dir, "a.mp3"));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

describe("a clip bigger than the whole DECODE_MEMORY_MAX_MB", () => {
  let stack: Stack;
  let provider: ProviderServer;
  let key: string;

  beforeAll(async () => {
    provider = await startProviderServer("small-memory");
    // 1 MiB holds 32.7 s of decoded audio: pro's per-request limit (4 h) is far above it.
    // splitting off: the clip that fits reaches the worker whole
    stack = await startStack({ WORKER_EMBEDDED: "none", WORKER_OPENAI_URL: provider.url, WORKER_HEARTBEAT_MS: "500", DECODE_MEMORY_MAX_MB: "1", SEGMENT_SPLIT_MIN_SECONDS: "100000" });
    key = (await stack.issueKey("pro", "tenant-small-memory")).key;
  }, 120_000);
  afterAll(async () => {
    await stack?.stop();
    await provider?.close();
  });

  const post = async (bytes: Uint8Array, name: string) => {
    const form = new FormData();
    form.set("file", new Blob([new Uint8Array(bytes)]), name);
    form.set("response_format", "json");
    const res = await stack.fetch("/v1/audio/transcriptions", { method: "POST", body: form, headers: { authorization: `Bearer ${key}` } });
    return { res, body: (await res.json()) as any };
  };

  it("is 413 audio_too_long naming the bound (from the probe when the length is stated, else at the decoded size), and shorter clips are answered", async () => {
    const stated = await post(mp3(60, "file"), "stated.mp3");
    expect(stated.res.status).toBe(413);
    expect(stated.body.error).toMatchObject({ code: "audio_too_long", param: "file" });
    expect(stated.body.error.message).toMatch(/DECODE_MEMORY_MAX_MB/);
    expect(stated.res.headers.get("server-timing") ?? "").not.toMatch(/decode/);

    const guessed = await post(mp3(60, "pipe"), "guessed.mp3");
    expect(guessed.res.status).toBe(413);
    expect(guessed.body.error.message).toMatch(/DECODE_MEMORY_MAX_MB/);
    expect(guessed.res.headers.get("server-timing") ?? "").toMatch(/decode/);
    expect(provider.requests).toHaveLength(0);

    // Released: the refused clips hold nothing, so one that fits is transcribed.
    await waitFor(async () => (await post(JFK, "jfk.wav")).res.status === 200, { timeoutMs: 30_000, what: "a normal clip answered" });
    expect(provider.requests.at(-1)!.samples).toBeGreaterThan(11 * 16_000 - 1000);
  }, 180_000);
});
