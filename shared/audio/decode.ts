import { spawn } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { availableParallelism, tmpdir } from "node:os";
import { join } from "node:path";
import { AppError } from "../errors";
import { pcm16MonoFromWav, TARGET_SAMPLE_RATE } from "./wav";

/**
 * Decodes any audio ffmpeg understands (WAV, MP3, FLAC, OGG/Opus, M4A, WebM, …) to
 * 16 kHz mono PCM16LE, the one format every worker takes.
 *
 * - PCM16 mono 16 kHz WAV skips ffmpeg entirely.
 * - Input goes through a private temp file, not a pipe: MP4/M4A files often keep
 *   their index at the end and need a seekable input.
 * - `maxSeconds` bounds the work: ffmpeg decodes at most maxSeconds + 1 s, and a
 *   longer clip is rejected with 413 `audio_too_long` without decoding the rest.
 * - An empty upload is an empty clip (zero samples), not an error: the spec bills and
 *   transcribes whatever is posted.
 */
export interface DecodedAudio {
  pcm: Int16Array;
  sampleRate: typeof TARGET_SAMPLE_RATE;
  durationSeconds: number;
}

export interface DecodeOptions {
  /** Reject clips longer than this many seconds (413 audio_too_long). */
  maxSeconds?: number;
  /** Kill ffmpeg after this long (default 60 s + 30 ms per allowed audio second). */
  timeoutMs?: number;
  ffmpegPath?: string;
}

export async function decodeAudio(bytes: Uint8Array, options: DecodeOptions = {}): Promise<DecodedAudio> {
  if (bytes.byteLength === 0) return { pcm: new Int16Array(0), sampleRate: TARGET_SAMPLE_RATE, durationSeconds: 0 };
  const direct = pcm16MonoFromWav(bytes);
  const pcm = direct ?? (await runFfmpeg(bytes, options));
  const durationSeconds = pcm.length / TARGET_SAMPLE_RATE;
  if (options.maxSeconds !== undefined && durationSeconds > options.maxSeconds) {
    throw tooLong(options.maxSeconds, direct ? durationSeconds : undefined);
  }
  return { pcm, sampleRate: TARGET_SAMPLE_RATE, durationSeconds };
}

function tooLong(maxSeconds: number, actual?: number): AppError {
  const got = actual === undefined ? "longer" : `${actual.toFixed(1)} s`;
  return new AppError("too_large", "audio_too_long", `audio is ${got}; this plan allows at most ${maxSeconds} s per request`, {
    param: "file",
    type: "invalid_request_error",
  });
}

/** ffmpeg demuxers accepted for untrusted input: audio files and the common A/V containers. */
const INPUT_FORMATS = [
  "wav", "w64", "mp3", "flac", "ogg", "mov", "matroska", "aac", "ac3", "eac3", "amr", "amrnb", "amrwb",
  "au", "aiff", "caf", "wv", "ape", "asf", "avi", "flv", "mpegts", "mpeg", "mp2", "tta", "voc", "dts", "truehd",
].join(",");

/**
 * ffmpeg options to put before `-i` for any untrusted input file: only the local file
 * protocol and only media containers. Without them a playlist (HLS, concat script…)
 * makes ffmpeg fetch URLs or read other local files, around any SSRF guard.
 */
export const UNTRUSTED_INPUT_ARGS: readonly string[] = ["-protocol_whitelist", "file", "-format_whitelist", INPUT_FORMATS];

// At most this many ffmpeg processes per Node process; more decodes wait their turn
// (a burst of MP3 uploads should not fork hundreds of processes on a small host).
const MAX_DECODERS = Math.max(2, availableParallelism() * 2);
let activeDecoders = 0;
const waitingDecoders: (() => void)[] = [];

async function runFfmpeg(bytes: Uint8Array, options: DecodeOptions): Promise<Int16Array> {
  // A finishing decode hands its slot straight to the next waiter.
  if (activeDecoders >= MAX_DECODERS) await new Promise<void>((r) => waitingDecoders.push(r));
  else activeDecoders++;
  try {
    return await runFfmpegNow(bytes, options);
  } finally {
    const next = waitingDecoders.shift();
    if (next) next();
    else activeDecoders--;
  }
}

async function runFfmpegNow(bytes: Uint8Array, options: DecodeOptions): Promise<Int16Array> {
  const dir = await mkdtemp(join(tmpdir(), "stt-decode-"));
  const input = join(dir, "input");
  try {
    await writeFile(input, bytes);
    const args = [
      "-nostdin",
      "-hide_banner",
      "-loglevel",
      "error",
      ...UNTRUSTED_INPUT_ARGS,
      "-i",
      input,
      "-vn",
      "-sn",
      "-dn",
    ];
    if (options.maxSeconds !== undefined) args.push("-t", String(options.maxSeconds + 1));
    args.push("-ac", "1", "-ar", String(TARGET_SAMPLE_RATE), "-f", "s16le", "-acodec", "pcm_s16le", "pipe:1");
    const { stdout, stderr, code, timedOut } = await run(options.ffmpegPath ?? "ffmpeg", args, options.timeoutMs ?? 60_000 + (options.maxSeconds ?? 0) * 30);
    if (timedOut) {
      throw new AppError("unavailable", "decode_timeout", "decoding the audio took too long; try a shorter clip or a simpler format");
    }
    if (code !== 0) {
      throw new AppError("unsupported", "unsupported_audio", `the file could not be decoded as audio (${summarise(stderr)})`, {
        param: "file",
        type: "invalid_request_error",
      });
    }
    const n = Math.floor(stdout.length / 2);
    const pcm = new Int16Array(n);
    Buffer.from(pcm.buffer).set(stdout.subarray(0, n * 2));
    return pcm;
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

function summarise(stderr: string): string {
  const line = stderr.split("\n").map((l) => l.replace(/\/[^\s:]*stt-decode-[^\s:]*/g, "<upload>").trim()).filter(Boolean).at(-1);
  return (line ?? "unknown format").slice(0, 200);
}

function run(cmd: string, args: string[], timeoutMs: number): Promise<{ stdout: Buffer; stderr: string; code: number | null; timedOut: boolean }> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { stdio: ["ignore", "pipe", "pipe"] });
    const out: Buffer[] = [];
    let err = "";
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      child.kill("SIGKILL");
    }, timeoutMs);
    child.stdout.on("data", (d: Buffer) => out.push(d));
    child.stderr.on("data", (d: Buffer) => {
      if (err.length < 8192) err += d.toString();
    });
    child.on("error", (e) => {
      clearTimeout(timer);
      reject(new AppError("unavailable", "decoder_unavailable", `ffmpeg could not be started: ${e.message}`, { cause: e }));
    });
    child.on("close", (code) => {
      clearTimeout(timer);
      resolve({ stdout: Buffer.concat(out), stderr: err, code, timedOut });
    });
  });
}
