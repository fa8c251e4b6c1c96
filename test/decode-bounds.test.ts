import { execFileSync } from "node:child_process";
import { readFileSync, rmSync } from "node:fs";
import { mkdtemp, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { segmentEnvelope } from "../schemas/segment";
import { decodeAudio, ffmpegDecodeArgs, runLimited } from "../shared/audio/decode";
import { encodeWav } from "../shared/audio/wav";
import { startHttp, waitFor, waitForJobEnd, type LocalHttp } from "./support/jobs-helpers";
import { fixturePath } from "./support/fixtures";
import { fixture } from "./support/realtime-support";
import { startStack, type Stack } from "./support/stack";
import { startProviderServer, type ProviderServer } from "./support/workers-provider-server";

/**
 * Decoding is bounded by what the clip may be, not by what its header claims (issue 9,
 * item 4). On the real stack: the segment route and the batch fetch step probe first
 * and refuse absurd rates, over-long clips and clips over the key's budget before any
 * decode; what the probe cannot know is decoded under -t, output, CPU and heap limits.
 * The worker is a real local HTTP server (OpenAI-compatible), so every request that
 * reaches transcription is counted.
 */

/** jfk.wav's speech from "And" on: what the test clips hold, so the engine is asked (a clip without speech is answered without it, shared/audio/speech-gate.ts). */
const SPEECH = fixture("jfk.wav").subarray(Math.round(0.3 * 16_000));

/** A PCM16 mono WAV of speech whose header says `rate` Hz and whose data chunk claims `declared` bytes. */
function wavClaiming(rate: number, dataBytes: number, declared = dataBytes): Buffer {
  const wav = encodeWav(new Int16Array(dataBytes / 2).map((_, i) => SPEECH[i % SPEECH.length]!));
  wav.writeUInt32LE(rate, 24);
  wav.writeUInt32LE(rate * 2, 28);
  wav.writeUInt32LE(Math.min(declared, 0xffffffff - 36), 40);
  wav.writeUInt32LE(Math.min(36 + declared, 0xffffffff), 4);
  return wav;
}

/** The hostile upload of the report: 7 KB of PCM whose header declares 1 Hz (3,600 s). */
const HOSTILE = wavClaiming(1, 7200);

/** `seconds` of jfk.wav, looped, encoded by ffmpeg at 8 kHz; `pipe` output has no length header (a bitrate guess). */
function encoded(format: "ogg" | "mp3", seconds: number, how: "file" | "pipe" = "file"): Buffer {
  const codec = format === "ogg" ? ["-c:a", "libopus", "-b:a", "6k"] : ["-b:a", "8k"];
  const src = ["-v", "error", "-stream_loop", "-1", "-i", fixturePath("jfk.wav"), "-t", String(seconds), "-ar", "8000", "-ac", "1", ...codec, "-f", format];
  if (how === "pipe") return execFileSync("ffmpeg", [...src, "pipe:1"], { maxBuffer: 1 << 26 });
  const path = join(tmpdir(), `decode-bounds-${process.pid}-${seconds}.${format}`);
  execFileSync("ffmpeg", [...src, "-y", path]);
  const bytes = readFileSync(path);
  rmSync(path, { force: true });
  return bytes;
}

const timing = (res: Response) => Object.fromEntries((res.headers.get("server-timing") ?? "").split(/,\s*/).filter(Boolean).map((p) => {
  const [name, dur] = p.split(";dur=");
  return [name!, Number(dur)];
})) as Record<string, number>;

describe("decode bounds on the segment route", () => {
  let stack: Stack;
  let provider: ProviderServer;
  let pro: { key: string; id: string };
  let free: { key: string; id: string };

  beforeAll(async () => {
    provider = await startProviderServer("bounded");
    stack = await startStack({ WORKER_EMBEDDED: "none", WORKER_OPENAI_URL: provider.url, WORKER_HEARTBEAT_MS: "500", SEGMENT_MAX_UPLOAD_BYTES: String(4_000_000) });
    pro = await stack.issueKey("pro", "tenant-bounds");
    free = await stack.issueKey("free", "tenant-bounds-free");
    const router = stack.runtime.ctx.router as unknown as { workers(): { warm: boolean }[] };
    await waitFor(async () => router.workers().some((w) => w.warm), { timeoutMs: 10_000, what: "a warm worker" });
  });
  afterAll(async () => {
    await stack?.stop();
    await provider?.close();
  });

  const post = async (bytes: Uint8Array, name: string, key = pro.key) => {
    const form = new FormData();
    form.set("file", new Blob([new Uint8Array(bytes)]), name);
    form.set("response_format", "json");
    const started = performance.now();
    const res = await stack.fetch("/v1/audio/transcriptions", { method: "POST", body: form, headers: { authorization: `Bearer ${key}` } });
    const body = (await res.json()) as any;
    return { res, body, ms: performance.now() - started, timing: timing(res) };
  };

  const lastAudit = async (keyId: string) => {
    const { streams, subjects } = stack.nats.topology;
    const msg = await stack.nats.jsm.streams.getMessage(streams.segments.name, { last_by_subj: subjects.segmentEvent(keyId) });
    return segmentEnvelope.parse(msg!.json());
  };

  it("the 7 KB WAV declaring 1 Hz is 415 from its header: no decode, no transcription, in milliseconds", async () => {
    expect(HOSTILE.length).toBeLessThan(7300);
    const before = provider.requests.length;
    // pro allows 4 h per request: before this fix it decoded 3,600 s and sent them to the worker.
    const { res, body, ms, timing: t } = await post(HOSTILE, "hostile.wav");
    console.log(`hostile 1 Hz WAV: HTTP ${res.status} in ${ms.toFixed(0)} ms, Server-Timing ${res.headers.get("server-timing")}`);
    expect(res.status).toBe(415);
    expect(body.error).toMatchObject({ code: "unsupported_audio", type: "invalid_request_error", param: "file" });
    expect(body.error.message).toMatch(/1 Hz.*8000–384000 Hz/);
    expect(t.probe).toBeLessThan(50);
    expect(t.decode).toBeUndefined();
    expect(ms).toBeLessThan(1000);
    expect(provider.requests.length).toBe(before);
    expect(await lastAudit(pro.id)).toMatchObject({ type: "SegmentFailed", data: { code: "unsupported_audio", audioSeconds: 0 } });
  });

  it("4 kHz and 500 kHz WAVs are 415 too; 8 kHz is transcribed", async () => {
    for (const rate of [4_000, 500_000]) {
      const { res, body, timing: t } = await post(wavClaiming(rate, 16_000), `r${rate}.wav`);
      expect(res.status, `${rate} Hz`).toBe(415);
      expect(body.error.code).toBe("unsupported_audio");
      expect(body.error.message).toContain(`${rate} Hz`);
      expect(t.decode).toBeUndefined();
    }
    const ok = await post(wavClaiming(8_000, 16_000), "r8000.wav");
    expect(ok.res.status).toBe(200);
    expect(ok.body.text).toBe("bounded heard 1.00 seconds");
  });

  it("a header claiming an hour over 7 KB of data is the 0.225 s it holds: decoded, transcribed and billed as such", async () => {
    const claimsAnHour = wavClaiming(16_000, 7200, 3600 * 32_000);
    const { res, body, ms } = await post(claimsAnHour, "claims-an-hour.wav", free.key);
    expect(res.status).toBe(200);
    expect(body.text).toBe("bounded heard 0.23 seconds");
    expect(provider.requests.at(-1)!.samples).toBe(3600);
    expect(ms).toBeLessThan(2000);
    expect(await lastAudit(free.id)).toMatchObject({ type: "SegmentTranscribed", data: { audioSeconds: 0.225 } });
  });

  it("a WAV truncated inside its header is 415 at once; an MP3 cut short is decoded for what it holds", async () => {
    const full = encodeWav(new Int16Array(16_000));
    const { res, body, timing: t } = await post(full.subarray(0, 30), "truncated.wav");
    expect(res.status).toBe(415);
    expect(body.error.code).toBe("unsupported_audio");
    expect(body.error.message).toMatch(/truncated/);
    expect(t.decode).toBeUndefined();
    // Its Xing header still says 60 s: a length that contradicts the file size is only a hint.
    const cut = encoded("mp3", 60).subarray(0, 3000);
    const mp3 = await post(cut, "cut.mp3", free.key);
    expect(mp3.res.status).toBe(200);
    // 3000 bytes of 8 kbps: about 3 s, nowhere near the 60 s the header states.
    const heard = Number(/^bounded heard (\d+\.\d\d) seconds$/.exec(mp3.body.text)?.[1]);
    expect(heard).toBeGreaterThan(1);
    expect(heard).toBeLessThan(4);
  });

  it("413 audio_too_long before decoding when the container states the length (OGG, MP3 with a Xing header)", async () => {
    for (const [format, bytes] of [["ogg", encoded("ogg", 905)], ["mp3", encoded("mp3", 905)]] as const) {
      expect(bytes.length).toBeLessThan(4_000_000);
      const { res, body, ms, timing: t } = await post(bytes, `long.${format}`, free.key);
      console.log(`905 s ${format} (${bytes.length} B) on free: HTTP ${res.status} in ${ms.toFixed(0)} ms, Server-Timing ${res.headers.get("server-timing")}`);
      expect(res.status, format).toBe(413);
      expect(body.error).toMatchObject({ code: "audio_too_long", param: "file" });
      expect(body.error.message).toMatch(/audio is 905\.\d s; this plan allows at most 900 s/);
      expect(t.decode, format).toBeUndefined();
    }
    expect(await lastAudit(free.id)).toMatchObject({ type: "SegmentFailed", data: { code: "audio_too_long" } });
  });

  it("a length ffprobe can only guess from the bitrate is decoded no further than the plan allows", async () => {
    const guessed = encoded("mp3", 905, "pipe");
    const { res, body, timing: t } = await post(guessed, "guessed.mp3", free.key);
    expect(res.status).toBe(413);
    expect(body.error.code).toBe("audio_too_long");
    // It was decoded (the probe could not refuse it), but only to 901 s: well under a second or two here.
    expect(t.decode).toBeGreaterThan(0);
    expect(t.decode).toBeLessThan(10_000);
  });

  it("quota before decode: a key with 5 s left gets 429 for a 60 s clip without decoding it", async () => {
    const spent = await stack.issueKey("free", "tenant-bounds-spent");
    await stack.runtime.ctx.usage.record({
      keyId: spent.id,
      ownerId: "tenant-bounds-spent",
      plane: "realtime",
      audioSeconds: 3595,
      requests: 1,
      subjectId: "sess_bounds",
      part: 0,
      at: new Date(),
    });
    await waitFor(
      async () => {
        const row = await stack.db.selectFrom("usage_windows").select("audio_seconds").where("key_id", "=", spent.id).executeTakeFirst();
        return row && Number(row.audio_seconds) >= 3595;
      },
      { timeoutMs: 10_000, what: "the usage projection" },
    );
    const before = provider.requests.length;
    for (const [name, bytes] of [["sixty.wav", encodeWav(new Int16Array(60 * 16_000))], ["sixty.ogg", encoded("ogg", 60)]] as const) {
      const { res, body, timing: t } = await post(bytes, name, spent.key);
      expect(res.status, name).toBe(429);
      expect(body.error).toMatchObject({ code: "audio_quota_exhausted", type: "rate_limit_error" });
      expect(body.error.message).toMatch(/has 5 s left; this clip is 60\.0 s/);
      expect(t.decode, name).toBeUndefined();
    }
    // A guessed length is decoded only as far as the budget (5 s + 1), then refused the same way.
    const guessed = await post(encoded("mp3", 60, "pipe"), "sixty.mp3", spent.key);
    expect(guessed.res.status).toBe(429);
    expect(guessed.body.error.code).toBe("audio_quota_exhausted");
    expect(guessed.timing.decode).toBeGreaterThan(0);
    // Within the budget, it goes through.
    const short = await post(encodeWav(SPEECH.subarray(0, 3 * 16_000)), "three.wav", spent.key);
    expect(short.res.status).toBe(200);
    expect(provider.requests.length).toBe(before + 1);
  });
});

describe("decode limits below the probe (defence in depth, real ffmpeg)", () => {
  it("decoding the 1 Hz WAV with the probe bypassed stays bounded: at most the allowed seconds, small heap", async () => {
    const started = performance.now();
    // A probe that knows nothing, as for a container that hides its rate until decoded.
    const blind = { format: "unknown", sampleRate: 16_000, channels: 1 };
    const outcome = await decodeAudio(HOSTILE, { maxSeconds: 30, probe: blind }).then(
      (a) => `decoded ${a.durationSeconds} s`,
      (e: { status: number; code: string }) => `${e.status} ${e.code}`,
    );
    const ms = performance.now() - started;
    console.log(`1 Hz WAV with the probe bypassed, maxSeconds 30: ${outcome} in ${ms.toFixed(0)} ms`);
    // Under the 256 MiB heap limit ffmpeg's 1 Hz resampler either fails (415) or yields at most 31 s.
    expect(outcome).toMatch(/^(415 unsupported_audio|413 audio_too_long|decoded ([0-9]|[12][0-9]|30)(\.\d+)? s)$/);
    expect(ms).toBeLessThan(10_000);
  });

  it("runLimited stops a process at its CPU limit, its stdout cap and its file-size cap", async () => {
    const cpu = await runLimited("sh", ["-c", "while :; do :; done"], { timeoutMs: 20_000, cpuSeconds: 1, dataBytes: 64 << 20 });
    expect(cpu.stop).toBe("cpu");
    const out = await runLimited("yes", [], { timeoutMs: 20_000, cpuSeconds: 10, dataBytes: 64 << 20, stdoutBytes: 1 << 20, collectStdout: true });
    expect(out.stop).toBe("stdout");
    expect(out.stdout.reduce((n, b) => n + b.length, 0)).toBeLessThanOrEqual(1 << 20);
    const dir = await mkdtemp(join(tmpdir(), "decode-bounds-"));
    try {
      const wav = join(dir, "in.wav");
      execFileSync("ffmpeg", ["-v", "error", "-f", "lavfi", "-i", "sine=r=16000", "-t", "10", "-y", wav]);
      const pcm = join(dir, "out.pcm");
      const file = await runLimited("ffmpeg", ffmpegDecodeArgs(wav, pcm), { timeoutMs: 20_000, cpuSeconds: 10, dataBytes: 256 << 20, fileBytes: 100_000 });
      expect(file.stop).toBe("file_size");
      expect((await stat(pcm)).size).toBeLessThanOrEqual(100_000);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe("decode bounds on the batch plane", () => {
  let stack: Stack;
  let audio: LocalHttp;
  let provider: ProviderServer;
  const files: Record<string, Buffer> = {};

  beforeAll(async () => {
    files["/hostile.wav"] = HOSTILE;
    files["/long.ogg"] = encoded("ogg", 905);
    audio = await startHttp((req, res) => {
      const body = files[req.url ?? ""];
      res.writeHead(body ? 200 : 404, { "content-type": "application/octet-stream" });
      res.end(body);
    });
    provider = await startProviderServer("bounded-jobs");
    stack = await startStack({ WORKER_EMBEDDED: "none", WORKER_OPENAI_URL: provider.url });
  });
  afterAll(async () => {
    await stack?.stop();
    await audio?.stop();
    await provider?.close();
  });

  it("a job whose audio declares 1 Hz, or states 905 s on a 900 s plan, fails for good at fetch without decoding", async () => {
    const { key } = await stack.issueKey("free", "tenant-bounds-jobs");
    const submit = async (path: string) => {
      const res = await stack.fetch("/v1/audio/transcriptions/jobs", {
        method: "POST",
        headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
        body: JSON.stringify({ audio_url: `${audio.url}${path}` }),
      });
      expect(res.status).toBe(202);
      return ((await res.json()) as { workflow_id: string }).workflow_id;
    };
    const poll = (id: string) => waitForJobEnd(stack.fetch, key, id, { timeoutMs: 60_000, everyMs: 100 });
    const [hostile, long] = await Promise.all([submit("/hostile.wav"), submit("/long.ogg")]);
    const [h, l] = await Promise.all([poll(hostile), poll(long)]);
    expect(h.status).toBe("errored");
    expect(h.error).toMatchObject({ code: "unsupported_audio", message: expect.stringMatching(/1 Hz/) });
    // Refused on the first attempt: a permanent error is not retried.
    expect(h.steps[0]).toMatchObject({ name: "fetch", status: "errored", attempt: 1, error: { code: "unsupported_audio" } });
    expect(l.status).toBe("errored");
    // The probe's figure (905 s), not a decoded one (which would stop at 901 s).
    expect(l.error).toMatchObject({ code: "audio_too_long", message: expect.stringMatching(/905\.\d s/) });
    expect(l.steps[0]).toMatchObject({ name: "fetch", status: "errored", attempt: 1 });
    expect(provider.requests.length).toBe(0);
  });
});
