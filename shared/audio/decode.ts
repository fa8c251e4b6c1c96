import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdtemp, open, rm, stat, writeFile } from "node:fs/promises";
import { availableParallelism, tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { z } from "zod";
import { AppError } from "../errors";
import { assertPlausibleStream, assertProbeFits, audioTooLong, EMPTY_PROBE, probeWavHeader, unsupportedAudio, type AudioProbe } from "./probe";
import type { PcmHold } from "./pcm-memory";
import { pcm16MonoFromWav, TARGET_SAMPLE_RATE } from "./wav";

/**
 * Decodes any audio ffmpeg understands (WAV, MP3, FLAC, OGG/Opus, M4A, WebM, …) to
 * 16 kHz mono PCM16LE, the one format every worker takes.
 *
 * The work is bounded by what the caller allows, never by what the file claims:
 * - Probe first (probeAudio): a RIFF header is read here, anything else by ffprobe;
 *   absurd sample rates and channel counts are 415 `unsupported_audio`, and a clip the
 *   probe already shows too long is 413 `audio_too_long`, both before any decode.
 * - ffmpeg decodes at most maxSeconds + 1 s (`-t`) to a private temp file capped at the
 *   bytes that many seconds make (RLIMIT_FSIZE), under prlimit(1): at most
 *   decodeCpuSeconds() of CPU and DECODER_DATA_BYTES of heap, plus a wall-clock timeout.
 * - The PCM is read into memory once, at its exact size, and only after the caller's
 *   hold on the process's PCM memory (`options.hold`) has room for it.
 * - PCM16 mono 16 kHz WAV skips ffmpeg entirely.
 * - Input goes through a private temp file, not a pipe: MP4/M4A files often keep
 *   their index at the end and need a seekable input.
 * - An empty upload is an empty clip (zero samples), not an error: the spec bills and
 *   transcribes whatever is posted.
 */
export interface DecodedAudio {
  pcm: Int16Array;
  sampleRate: typeof TARGET_SAMPLE_RATE;
  durationSeconds: number;
}

export interface DecodeOptions {
  /** Reject clips longer than this many seconds (413 audio_too_long); bounds the decode. */
  maxSeconds?: number;
  /** Kill ffmpeg after this long (default 60 s + 30 ms per allowed audio second). */
  timeoutMs?: number;
  /** The probe the caller already made (probeAudio), so the file is not probed twice. */
  probe?: AudioProbe;
  /**
   * The caller's hold on the process's PCM memory (shared/audio/pcm-memory.ts): resized
   * to the clip's exact size before its PCM is allocated, so a clip that does not fit
   * is refused (503 `server_busy`) without being read into memory.
   */
  hold?: PcmHold;
  /** Keep this many channels (the probe's), interleaved, instead of mixing down to mono (multichannel; shared/audio/channels.ts splits them). */
  channels?: number;
  ffmpegPath?: string;
}

/** Seconds decoded past the caller's limit, so "longer than allowed" is seen without decoding the rest. */
const DECODE_MARGIN_SECONDS = 1;
/**
 * Heap (RLIMIT_DATA) for one ffmpeg or ffprobe. Real files decode in under 64 MiB at any
 * rate up to 384 kHz; the 1 Hz → 16 kHz resampler of the hostile WAV wanted 400 MB.
 */
export const DECODER_DATA_BYTES = 256 * 1024 * 1024;
/**
 * ffprobe reads headers only: 5 s of CPU are plenty (PROBE_CPU_SECONDS is the guard).
 * The wall clock only catches a hung probe; it is generous because starting ffprobe
 * is mostly loading its libraries: 2–3 s of wall clock for 0.3 s of CPU on a host with
 * a load of 11 per core, where a 5 s timeout failed three concurrent probes.
 */
export const PROBE_TIMEOUT_MS = 15_000;
const PROBE_CPU_SECONDS = 5;
/** The ceiling when a caller sets no maxSeconds (tests, benches): pro's 4 hours. */
const UNBOUNDED_SECONDS = 14_400;

/**
 * CPU seconds one decode may use: 5 s plus 1 s per 50 s of allowed audio. ffmpeg decodes
 * speech codecs at 300–1000× real time here, so a real file never comes near it; a
 * pathological one is stopped at 23 s (free, 900 s) or 293 s (pro, 4 h).
 */
export function decodeCpuSeconds(maxSeconds: number = UNBOUNDED_SECONDS): number {
  return Math.ceil(5 + maxSeconds / 50);
}

/** The most PCM bytes a decode bounded to maxSeconds may produce (16 kHz mono s16le, plus slack). */
export function decodeOutputBytes(maxSeconds: number): number {
  return Math.ceil((maxSeconds + DECODE_MARGIN_SECONDS) * TARGET_SAMPLE_RATE) * 2 + 64 * 1024;
}

export async function decodeAudio(bytes: Uint8Array, options: DecodeOptions = {}): Promise<DecodedAudio> {
  if (bytes.byteLength === 0) return { pcm: new Int16Array(0), sampleRate: TARGET_SAMPLE_RATE, durationSeconds: 0 };
  const probe = options.probe ?? (await probeAudio(bytes));
  assertProbeFits(probe, options.maxSeconds);
  const channels = options.channels ?? 1;
  const direct = probe.durationSource === "exact" && channels === 1 ? pcm16MonoFromWav(bytes) : undefined;
  // A WAV read directly is no bigger than its upload; it is held once it exists.
  if (direct) options.hold?.resize(direct.byteLength);
  const pcm = direct ?? (await decodeWithFfmpeg(bytes, options));
  const durationSeconds = Math.floor(pcm.length / channels) / TARGET_SAMPLE_RATE;
  if (options.maxSeconds !== undefined && durationSeconds > options.maxSeconds) {
    throw audioTooLong(options.maxSeconds, direct ? durationSeconds : undefined);
  }
  return { pcm, sampleRate: TARGET_SAMPLE_RATE, durationSeconds };
}

/**
 * Probes an upload before decoding it: 415 `unsupported_audio` for a file ffprobe
 * cannot read as audio or whose streams have absurd rates or channel counts. A PCM WAV
 * is answered from its header (exact, no process); anything else costs one ffprobe
 * (~60 ms). Callers compare the result with their limits and budgets (trustedDuration)
 * before paying for decodeAudio, and hand it on as `options.probe`.
 */
export async function probeAudio(bytes: Uint8Array, options: { timeoutMs?: number } = {}): Promise<AudioProbe> {
  if (bytes.byteLength === 0) return EMPTY_PROBE;
  const wav = probeWavHeader(bytes);
  if (wav?.durationSource === "exact") return wav;
  const result = await withTempFile(bytes, (path) => withDecoderSlot(() => ffprobeFile(path, options)));
  if ("unreadable" in result) throw unsupportedAudio(`the file could not be decoded as audio (${result.unreadable})`);
  return result.probe;
}

export type FileProbe = { probe: AudioProbe } | { unreadable: string };

/**
 * probeAudio for a file on disk (the batch plane's downloads): reads the first 64 KiB
 * for a RIFF header, else runs ffprobe. A file ffprobe cannot read is returned as
 * `unreadable` (with ffprobe's reason) for the caller to name in its own error code;
 * absurd streams throw 415 `unsupported_audio`.
 */
export async function probeAudioFile(path: string, options: { timeoutMs?: number; signal?: AbortSignal } = {}): Promise<FileProbe> {
  const file = await open(path, "r");
  let head: Uint8Array;
  let size: number;
  try {
    size = (await file.stat()).size;
    const buf = Buffer.alloc(Math.min(size, 64 * 1024));
    const { bytesRead } = await file.read(buf, 0, buf.length, 0);
    head = buf.subarray(0, bytesRead);
  } finally {
    await file.close();
  }
  if (size === 0) return { probe: EMPTY_PROBE };
  const wav = probeWavHeader(head, size);
  if (wav?.durationSource === "exact") return { probe: wav };
  return withDecoderSlot(() => ffprobeFile(path, options));
}

const ffprobeOutput = z.object({
  streams: z.array(z.object({ codec_type: z.string().optional(), sample_rate: z.string().optional(), channels: z.number().optional() })).default([]),
  format: z.object({ format_name: z.string().optional(), duration: z.string().optional() }).default({}),
});

/** ffprobe's warnings that its duration is a guess (bitrate) or contradicts the file's size. */
const ROUGH_DURATION = /Estimating duration from bitrate|filesize and duration do not match/i;

async function ffprobeFile(path: string, options: { timeoutMs?: number; signal?: AbortSignal }): Promise<FileProbe> {
  const args = [
    "-hide_banner", "-loglevel", "warning", ...UNTRUSTED_INPUT_ARGS, "-threads", "1",
    "-show_entries", "format=format_name,duration:stream=codec_type,sample_rate,channels", "-of", "json", path,
  ];
  const run = await runLimited("ffprobe", args, {
    timeoutMs: options.timeoutMs ?? PROBE_TIMEOUT_MS,
    cpuSeconds: PROBE_CPU_SECONDS,
    dataBytes: DECODER_DATA_BYTES,
    collectStdout: true,
    signal: options.signal,
  });
  if (run.stop === "timeout") throw decodeTimeout();
  if (run.stop === "aborted") throw new AppError("unavailable", "aborted", "probing was interrupted");
  if (run.stop === "cpu") throw unsupportedAudio("the file needs too much work to even read its format");
  if (run.code !== 0) return { unreadable: summarise(run.stderr) };
  let parsed: z.infer<typeof ffprobeOutput>;
  try {
    parsed = ffprobeOutput.parse(JSON.parse(Buffer.concat(run.stdout).toString("utf8")));
  } catch {
    return { unreadable: "unreadable stream information" };
  }
  const audio = parsed.streams.filter((s) => s.codec_type === "audio");
  if (audio.length === 0) return { unreadable: "no audio stream" };
  // ffmpeg picks one audio stream itself: every one of them must be plausible.
  for (const s of audio) assertPlausibleStream(Number(s.sample_rate ?? 0), s.channels ?? 0);
  const duration = Number(parsed.format.duration);
  const probe: AudioProbe = { format: parsed.format.format_name ?? "unknown", sampleRate: Number(audio[0]!.sample_rate), channels: audio[0]!.channels! };
  if (Number.isFinite(duration) && duration >= 0) {
    probe.durationSeconds = duration;
    probe.durationSource = ROUGH_DURATION.test(run.stderr) ? "estimate" : "header";
  }
  return { probe };
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
const UNTRUSTED_INPUT_ARGS: readonly string[] = ["-protocol_whitelist", "file", "-format_whitelist", INPUT_FORMATS];

/**
 * The ffmpeg arguments that decode an untrusted `input` to 16 kHz mono s16le at
 * `output` (a path or `pipe:1`), at most maxSeconds + DECODE_MARGIN_SECONDS of it.
 */
export function ffmpegDecodeArgs(input: string, output: string, maxSeconds?: number, channels = 1): string[] {
  // One thread each for the decoder and the filter graph: ffmpeg starts one per core by
  // default, and every thread stack counts against the heap limit (RLIMIT_DATA).
  const args = ["-nostdin", "-hide_banner", "-loglevel", "error", "-filter_threads", "1", ...UNTRUSTED_INPUT_ARGS, "-threads", "1", "-i", input, "-vn", "-sn", "-dn"];
  if (maxSeconds !== undefined) args.push("-t", String(maxSeconds + DECODE_MARGIN_SECONDS));
  args.push("-ac", String(channels), "-ar", String(TARGET_SAMPLE_RATE), "-f", "s16le", "-acodec", "pcm_s16le", "-y", output);
  return args;
}

// At most this many ffmpeg/ffprobe processes per Node process; more wait their turn
// (a burst of MP3 uploads should not fork hundreds of processes on a small host).
const MAX_DECODERS = Math.max(2, availableParallelism() * 2);
let activeDecoders = 0;
const waitingDecoders: (() => void)[] = [];

async function withDecoderSlot<T>(work: () => Promise<T>): Promise<T> {
  // A finishing decode hands its slot straight to the next waiter.
  if (activeDecoders >= MAX_DECODERS) await new Promise<void>((r) => waitingDecoders.push(r));
  else activeDecoders++;
  try {
    return await work();
  } finally {
    const next = waitingDecoders.shift();
    if (next) next();
    else activeDecoders--;
  }
}

async function withTempFile<T>(bytes: Uint8Array, use: (path: string) => Promise<T>): Promise<T> {
  const dir = await mkdtemp(join(tmpdir(), "stt-decode-"));
  try {
    const input = join(dir, "input");
    await writeFile(input, bytes);
    return await use(input);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/**
 * ffmpeg spools the PCM to a file beside the input and the file is read into one
 * Int16Array of its exact size: memory holds the clip once, and only after its length
 * is known (against maxSeconds and options.hold). Collecting ffmpeg's stdout instead
 * held it twice (the chunks, then the copy): 920 MB for a 4-hour clip.
 */
async function decodeWithFfmpeg(bytes: Uint8Array, options: DecodeOptions): Promise<Int16Array> {
  const channels = options.channels ?? 1;
  return withTempFile(bytes, async (input) => {
    const output = join(dirname(input), "output.pcm");
    const max = options.maxSeconds;
    const run = await withDecoderSlot(() =>
      runLimited(options.ffmpegPath ?? "ffmpeg", ffmpegDecodeArgs(input, output, max, channels), {
        timeoutMs: options.timeoutMs ?? 60_000 + (max ?? 0) * 30,
        cpuSeconds: decodeCpuSeconds(max),
        dataBytes: DECODER_DATA_BYTES,
        fileBytes: decodeOutputBytes(max ?? UNBOUNDED_SECONDS) * channels,
      }),
    );
    // -t keeps a real decode under the file cap; passing it means ffmpeg did not stop where told.
    if (run.stop === "file_size") throw audioTooLong(max ?? UNBOUNDED_SECONDS);
    if (run.stop === "timeout") throw decodeTimeout();
    if (run.stop === "cpu") throw unsupportedAudio(`decoding the file needed more than ${decodeCpuSeconds(max)} s of CPU time`);
    if (run.code !== 0) throw unsupportedAudio(`the file could not be decoded as audio (${summarise(run.stderr)})`);
    const size = (await stat(output)).size;
    // Refused before a byte of it is in memory: too long for the plan, or no room now.
    if (max !== undefined && size / 2 / channels / TARGET_SAMPLE_RATE > max) throw audioTooLong(max);
    options.hold?.resize(size);
    return readPcmFile(output, size);
  });
}

/** Reads s16le PCM from `path` straight into an aligned Int16Array, in pieces (no intermediate buffers). */
async function readPcmFile(path: string, bytes: number): Promise<Int16Array> {
  const pcm = new Int16Array(Math.floor(bytes / 2));
  const view = new Uint8Array(pcm.buffer);
  const file = await open(path, "r");
  let offset = 0;
  try {
    while (offset < view.length) {
      const { bytesRead } = await file.read(view, offset, Math.min(view.length - offset, READ_PIECE_BYTES), offset);
      if (bytesRead === 0) break;
      offset += bytesRead;
    }
  } finally {
    await file.close();
  }
  return offset < view.length ? pcm.subarray(0, Math.floor(offset / 2)) : pcm;
}

/** One read of the spooled PCM: 16 MiB keeps a libuv thread from being held for long. */
const READ_PIECE_BYTES = 16 * 1024 * 1024;

function decodeTimeout(): AppError {
  return new AppError("unavailable", "decode_timeout", "decoding the audio took too long; try a shorter clip or a simpler format");
}

function summarise(stderr: string): string {
  const line = stderr.split("\n").map((l) => l.replace(/\/[^\s:]*stt-(decode|job)-[^\s:]*/g, "<upload>").trim()).filter(Boolean).at(-1);
  return (line ?? "unknown format").slice(0, 200);
}

export interface RunLimits {
  timeoutMs: number;
  /** RLIMIT_CPU: soft = hard, so the kernel sends SIGKILL (ffmpeg traps SIGXCPU and exits "normally"). */
  cpuSeconds: number;
  /** RLIMIT_DATA: heap and anonymous mappings; an allocation past it fails. */
  dataBytes: number;
  /** RLIMIT_FSIZE: a write past it fails with SIGXFSZ (file outputs). */
  fileBytes?: number;
  /** Kill the process once its stdout passed this many bytes. */
  stdoutBytes?: number;
  collectStdout?: boolean;
  signal?: AbortSignal;
}

export interface RunResult {
  code: number | null;
  stdout: Buffer[];
  stdoutBytes: number;
  stderr: string;
  /** Why the process was stopped, when it did not end on its own. */
  stop?: "timeout" | "cpu" | "file_size" | "stdout" | "aborted";
}

/**
 * prlimit(1) sets the limits in the child before it execs ffmpeg (Node's spawn has no
 * rlimit option). util-linux is essential on Debian, so it is there wherever ffmpeg is;
 * without it the wall-clock timeout and the output caps still hold.
 */
const PRLIMIT = ["/usr/bin/prlimit", "/bin/prlimit", "/usr/local/bin/prlimit"].find((p) => existsSync(p));

/** Runs a decoder under CPU, heap, file-size, output and wall-clock limits. */
export function runLimited(cmd: string, args: string[], limits: RunLimits): Promise<RunResult> {
  const rlimits = [`--cpu=${limits.cpuSeconds}`, `--data=${limits.dataBytes}`, "--core=0"];
  if (limits.fileBytes !== undefined) rlimits.push(`--fsize=${limits.fileBytes}`);
  const [file, argv] = PRLIMIT ? [PRLIMIT, [...rlimits, "--", cmd, ...args]] : [cmd, args];
  return new Promise((resolve, reject) => {
    const child = spawn(file, argv, { stdio: ["ignore", limits.collectStdout || limits.stdoutBytes !== undefined ? "pipe" : "ignore", "pipe"] });
    const stdout: Buffer[] = [];
    let stdoutBytes = 0;
    let stderr = "";
    let stop: RunResult["stop"];
    const kill = (why: NonNullable<RunResult["stop"]>) => {
      stop ??= why;
      child.kill("SIGKILL");
    };
    const timer = setTimeout(() => kill("timeout"), limits.timeoutMs);
    const onAbort = () => kill("aborted");
    limits.signal?.addEventListener("abort", onAbort, { once: true });
    child.stdout?.on("data", (d: Buffer) => {
      if (stop) return;
      stdoutBytes += d.length;
      if (limits.stdoutBytes !== undefined && stdoutBytes > limits.stdoutBytes) return kill("stdout");
      if (limits.collectStdout) stdout.push(d);
    });
    child.stderr?.on("data", (d: Buffer) => {
      if (stderr.length < 8192) stderr += d.toString();
    });
    const done = () => {
      clearTimeout(timer);
      limits.signal?.removeEventListener("abort", onAbort);
    };
    child.on("error", (e) => {
      done();
      reject(new AppError("unavailable", "decoder_unavailable", `${cmd} could not be started: ${e.message}`, { cause: e }));
    });
    child.on("close", (code, signal) => {
      done();
      // prlimit exits 126/127 when it cannot exec the decoder: that is ENOENT, not bad audio.
      if (PRLIMIT && (code === 126 || code === 127) && /failed to execute/.test(stderr)) {
        return reject(new AppError("unavailable", "decoder_unavailable", `${cmd} could not be started: ${summarise(stderr)}`));
      }
      // A SIGKILL we did not send is the kernel's: the CPU limit (or the OOM killer).
      if (!stop && (signal === "SIGKILL" || signal === "SIGXCPU")) stop = "cpu";
      if (!stop && signal === "SIGXFSZ") stop = "file_size";
      resolve({ code, stdout, stdoutBytes, stderr, stop });
    });
  });
}
