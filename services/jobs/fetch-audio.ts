import { spawn } from "node:child_process";
import { mkdtemp, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { UNTRUSTED_INPUT_ARGS } from "../../shared/audio/decode";
import { AppError, validationError } from "../../shared/errors";
import type { ObjectStore } from "../../shared/objects/index";
import { safeDownload } from "../../shared/net/safe-fetch";
import { artifactKeys } from "../../schemas/jobs";
import type { ActiveJob, AudioInfo } from "./job";

/**
 * The fetch step: download `audio_url` (SSRF-guarded, streamed to a private temp file
 * under a byte and a time limit), decode it with ffmpeg to 16 kHz mono PCM16LE (file
 * to file, so long recordings never sit in memory), and store the PCM as `audio.pcm`
 * in the job's artifact folder (`artifactPrefix`) for the slicer and the transcribers.
 *
 * Decoding stops one second past the plan's per-request limit: a longer file is then
 * known to be too long (the aggregate fails the job with `audio_too_long`) without
 * decoding hours of it.
 */
export interface FetchAudioOptions {
  objects: ObjectStore;
  allowPrivate: boolean;
  maxBytes: number;
  timeoutMs: number;
  signal?: AbortSignal;
}

export const SAMPLE_RATE = 16_000;

/** Content types that are certainly not audio: pages, documents, API answers. */
const notAudio = /^(text\/|application\/(json|xml|xhtml\+xml|javascript|pdf|zip|x-www-form-urlencoded)|image\/)/i;

export async function fetchAudio(job: ActiveJob, options: FetchAudioOptions): Promise<AudioInfo> {
  const dir = await mkdtemp(join(tmpdir(), "stt-job-"));
  try {
    const source = join(dir, "source");
    const res = await safeDownload(job.spec.audioUrl, source, {
      allowPrivate: options.allowPrivate,
      maxBytes: options.maxBytes,
      timeoutMs: options.timeoutMs,
      signal: options.signal,
    });
    const contentType = String(res.headers["content-type"] ?? "").split(";")[0]!.trim().toLowerCase() || undefined;
    if (contentType && notAudio.test(contentType)) {
      throw validationError("unsupported_media_type", `audio_url returned ${contentType}, not audio`);
    }
    if (res.bytes === 0) throw validationError("undecodable_audio", "audio_url returned an empty body");
    const pcmPath = join(dir, "audio.pcm");
    await decodeFileToPcm(source, pcmPath, { maxSeconds: job.spec.maxAudioSeconds + 1, timeoutMs: options.timeoutMs, signal: options.signal });
    const { size } = await stat(pcmPath);
    const samples = Math.floor(size / 2);
    const audioKey = artifactKeys.audio(job.spec);
    await options.objects.putFile(audioKey, pcmPath, { contentType: "audio/L16; rate=16000; channels=1" });
    return {
      bytes: res.bytes,
      ...(contentType ? { contentType } : {}),
      sampleRate: SAMPLE_RATE,
      samples,
      durationSeconds: Math.round((samples / SAMPLE_RATE) * 1000) / 1000,
      audioKey,
    };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** ffmpeg: any container/codec → raw 16 kHz mono s16le file. Throws `undecodable_audio`. */
export async function decodeFileToPcm(
  input: string,
  output: string,
  options: { maxSeconds?: number; timeoutMs: number; signal?: AbortSignal },
): Promise<void> {
  // The fetched file is untrusted: no playlists that make ffmpeg fetch URLs (SSRF) or read files.
  const args = ["-nostdin", "-hide_banner", "-loglevel", "error", ...UNTRUSTED_INPUT_ARGS, "-i", input, "-vn", "-sn", "-dn"];
  if (options.maxSeconds !== undefined) args.push("-t", String(options.maxSeconds));
  args.push("-ac", "1", "-ar", String(SAMPLE_RATE), "-f", "s16le", "-acodec", "pcm_s16le", "-y", output);
  const { code, stderr } = await new Promise<{ code: number | null; stderr: string }>((resolve, reject) => {
    const child = spawn("ffmpeg", args, { stdio: ["ignore", "ignore", "pipe"] });
    let err = "";
    child.stderr.on("data", (d: Buffer) => {
      if (err.length < 4000) err += d.toString();
    });
    const kill = () => child.kill("SIGKILL");
    const timer = setTimeout(kill, options.timeoutMs);
    options.signal?.addEventListener("abort", kill, { once: true });
    child.on("error", (e) => {
      clearTimeout(timer);
      reject(new AppError("unavailable", "decoder_unavailable", "ffmpeg could not be started", { cause: e }));
    });
    child.on("close", (c) => {
      clearTimeout(timer);
      options.signal?.removeEventListener("abort", kill);
      resolve({ code: c, stderr: err });
    });
  });
  if (options.signal?.aborted) throw new AppError("unavailable", "aborted", "decoding was interrupted");
  if (code === null) throw new AppError("upstream", "decode_timeout", `decoding did not finish within ${options.timeoutMs} ms`, { retryable: true });
  if (code !== 0) {
    const reason = stderr.split("\n").map((l) => l.replace(/\/\S*stt-job-\S*/g, "<audio>").trim()).filter(Boolean).at(-1) ?? "unknown format";
    throw validationError("undecodable_audio", `the audio could not be decoded (${reason.slice(0, 200)})`);
  }
}
