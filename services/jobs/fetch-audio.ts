import { mkdtemp, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  DECODER_DATA_BYTES,
  decodeCpuSeconds,
  decodeOutputBytes,
  ffmpegDecodeArgs,
  PROBE_TIMEOUT_MS,
  probeAudioFile,
  runLimited,
} from "../../shared/audio/decode";
import { assertProbeFits } from "../../shared/audio/probe";
import { AppError, validationError } from "../../shared/errors";
import type { ObjectStore } from "../../shared/objects/index";
import { safeDownload } from "../../shared/net/safe-fetch";
import { artifactKeys } from "../../schemas/jobs";
import type { ActiveJob, AudioInfo } from "../../domain/jobs/decider";
import { MAX_TRANSCRIBED_CHANNELS } from "../../domain/transcript/channels";

/**
 * The fetch step: download `audio_url` (SSRF-guarded, streamed to a private temp file
 * under a byte and a time limit), decode it with ffmpeg to 16 kHz mono PCM16LE (file
 * to file, so long recordings never sit in memory), and store the PCM as `audio.pcm`
 * in the job's artifact folder (`artifactPrefix`) for the slicer and the transcribers.
 * With `multichannel` the channels are kept, interleaved (at most
 * MAX_TRANSCRIBED_CHANNELS, else `too_many_channels`, permanent): the slicer and the
 * transcribers read each channel out of it (docs/jobs-reference.md "Multichannel").
 *
 * The file is probed before it is decoded (RIFF header, else ffprobe): a sample rate
 * outside 8–384 kHz fails the job with `unsupported_audio`, a stated length over the
 * plan's per-request limit with `audio_too_long`, both permanent and without decoding.
 * A length that is unknown or lies is bounded by the decode: it stops one second past
 * the limit (the aggregate then fails the job with `audio_too_long`), under the CPU,
 * heap and output-size limits of shared/audio/decode.ts.
 */
export interface FetchAudioOptions {
  objects: ObjectStore;
  allowPrivate: boolean;
  maxBytes: number;
  timeoutMs: number;
  /** A download below this rate over `minRateWindowMs` fails the job with `fetch_too_slow` (0: off). */
  minBytesPerSecond?: number;
  minRateWindowMs?: number;
  /** Waits for a decode slot of this replica (fetch-slots.ts); without it decodes are not gated. */
  decodeSlot?: (owner: string, signal?: AbortSignal) => Promise<() => void>;
  signal?: AbortSignal;
}

const SAMPLE_RATE = 16_000;

/** Content types that are certainly not audio: pages, documents, API answers. */
const notAudio = /^(text\/|application\/(json|xml|xhtml\+xml|javascript|pdf|zip|x-www-form-urlencoded)|image\/)/i;

export async function fetchAudio(job: ActiveJob, options: FetchAudioOptions): Promise<AudioInfo> {
  const dir = await mkdtemp(join(tmpdir(), "stt-job-"));
  let releaseDecode = () => {};
  try {
    const source = join(dir, "source");
    const res = await safeDownload(job.spec.audioUrl, source, {
      allowPrivate: options.allowPrivate,
      maxBytes: options.maxBytes,
      timeoutMs: options.timeoutMs,
      minBytesPerSecond: options.minBytesPerSecond,
      minRateWindowMs: options.minRateWindowMs,
      signal: options.signal,
    });
    const contentType = String(res.headers["content-type"] ?? "").split(";")[0]!.trim().toLowerCase() || undefined;
    if (contentType && notAudio.test(contentType)) {
      throw validationError("unsupported_media_type", `audio_url returned ${contentType}, not audio`);
    }
    if (res.bytes === 0) throw validationError("undecodable_audio", "audio_url returned an empty body");
    // Downloads wait on other servers and run many at once; probing and decoding are CPU.
    if (options.decodeSlot) releaseDecode = await options.decodeSlot(job.spec.ownerId, options.signal);
    const probed = await probeAudioFile(source, { timeoutMs: Math.min(PROBE_TIMEOUT_MS, options.timeoutMs), signal: options.signal });
    if ("unreadable" in probed) throw validationError("undecodable_audio", `the audio could not be decoded (${probed.unreadable})`);
    assertProbeFits(probed.probe, job.spec.maxAudioSeconds);
    const channels = job.spec.multichannel ? probed.probe.channels : 1;
    if (channels > MAX_TRANSCRIBED_CHANNELS) {
      throw validationError("too_many_channels", `the audio has ${channels} channels; multichannel transcribes at most ${MAX_TRANSCRIBED_CHANNELS}`);
    }
    const pcmPath = join(dir, "audio.pcm");
    await decodeFileToPcm(source, pcmPath, { maxSeconds: job.spec.maxAudioSeconds, timeoutMs: options.timeoutMs, signal: options.signal, channels });
    const { size } = await stat(pcmPath);
    const samples = Math.floor(size / 2 / channels);
    const audioKey = artifactKeys.audio(job.spec);
    await options.objects.putFile(audioKey, pcmPath, { contentType: `audio/L16; rate=16000; channels=${channels}` });
    return {
      ...(job.spec.multichannel ? { channels } : {}),
      bytes: res.bytes,
      ...(contentType ? { contentType } : {}),
      sampleRate: SAMPLE_RATE,
      samples,
      durationSeconds: Math.round((samples / SAMPLE_RATE) * 1000) / 1000,
      audioKey,
    };
  } finally {
    releaseDecode();
    await rm(dir, { recursive: true, force: true });
  }
}

/**
 * ffmpeg: any container/codec → raw 16 kHz mono s16le file, at most maxSeconds + 1 s of
 * it, under prlimit's CPU, heap and file-size limits. Throws `undecodable_audio`, or
 * `unsupported_audio` for a file that needs more CPU than any real one.
 */
async function decodeFileToPcm(
  input: string,
  output: string,
  options: { maxSeconds?: number; timeoutMs: number; signal?: AbortSignal; channels: number },
): Promise<void> {
  const run = await runLimited("ffmpeg", ffmpegDecodeArgs(input, output, options.maxSeconds, options.channels), {
    timeoutMs: options.timeoutMs,
    cpuSeconds: decodeCpuSeconds(options.maxSeconds),
    dataBytes: DECODER_DATA_BYTES,
    ...(options.maxSeconds === undefined ? {} : { fileBytes: decodeOutputBytes(options.maxSeconds) * options.channels }),
    signal: options.signal,
  });
  if (run.stop === "aborted") throw new AppError("unavailable", "aborted", "decoding was interrupted");
  if (run.stop === "timeout") throw new AppError("upstream", "decode_timeout", `decoding did not finish within ${options.timeoutMs} ms`, { retryable: true });
  if (run.stop === "cpu") {
    throw new AppError("unsupported", "unsupported_audio", `decoding the audio needed more than ${decodeCpuSeconds(options.maxSeconds)} s of CPU time`);
  }
  // -t keeps a real decode under the cap; passing it means ffmpeg did not stop where told.
  if (run.stop === "file_size") throw new AppError("too_large", "audio_too_long", `the decoded audio passed the ${options.maxSeconds} s limit`);
  if (run.code !== 0) {
    const reason = run.stderr.split("\n").map((l) => l.replace(/\/\S*stt-job-\S*/g, "<audio>").trim()).filter(Boolean).at(-1) ?? "unknown format";
    throw validationError("undecodable_audio", `the audio could not be decoded (${reason.slice(0, 200)})`);
  }
}
