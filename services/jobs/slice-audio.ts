import { audioTooLong } from "../../shared/audio/probe";
import { AppError } from "../../shared/errors";
import type { ObjectStore } from "../../shared/objects/index";
import type { ChunkPlan } from "../../domain/jobs/events";
import type { ActiveJob } from "../../domain/jobs/decider";
import { boundaryWindows, MAX_CHUNKS, quietestPoint, slicesFromCuts } from "../../domain/jobs/slicing";
import { pickChannel } from "../../shared/audio/channels";

/**
 * The slice step: places the chunk boundaries (see domain/jobs/slicing.ts for the rule) by reading
 * only the few seconds around each target from the stored PCM. Chunks are sample
 * ranges of `audio.pcm`; the transcribers read their range directly, so slicing
 * copies no audio.
 *
 * The stored PCM is checked against the job before any of it is read: the fetch step
 * only stores 16 kHz audio within the plan's limit, so anything else was not made by
 * it and fails the job for good rather than being sliced.
 *
 * Multichannel (`audio.channels`, interleaved): each channel is sliced on its own, at its
 * own pauses, its chunks numbered after the channel before it's; the slice length is
 * raised so that all channels together make at most MAX_CHUNKS.
 */
export async function sliceAudio(job: ActiveJob, objects: ObjectStore): Promise<ChunkPlan[]> {
  const audio = job.audio;
  if (!audio) throw new AppError("internal", "audio_missing", "slice ran before the audio was fetched");
  const head = await objects.head(audio.audioKey);
  if (!head) throw new AppError("unavailable", "audio_missing", "the fetched audio is not in object storage yet");
  const channels = audio.channels ?? 1;
  const frameBytes = 2 * channels;
  const total = Math.floor(head.size / frameBytes);
  assertStoredAudioFits(job, total);
  const segmentSeconds = Math.max(job.spec.segmentSeconds, (total / audio.sampleRate) * channels / MAX_CHUNKS);
  const chunks: ChunkPlan[] = [];
  for (let channel = 0; channel < channels; channel++) {
    const cuts: number[] = [];
    for (const window of boundaryWindows(total, audio.sampleRate, segmentSeconds)) {
      const bytes = await objects.getRange(audio.audioKey, window.startSample * frameBytes, window.endSample * frameBytes);
      if (!bytes) throw new AppError("unavailable", "audio_missing", "the fetched audio disappeared");
      cuts.push(quietestPoint(pickChannel(toPcm(bytes), channels, channel), window, audio.sampleRate));
    }
    for (const slice of slicesFromCuts(total, cuts)) {
      chunks.push(audio.channels === undefined ? slice : { ...slice, index: chunks.length, channel });
    }
  }
  return chunks;
}

/** Permanent failures for stored audio the fetch step could not have written. */
function assertStoredAudioFits(job: ActiveJob, samples: number): void {
  const { sampleRate } = job.audio!;
  if (sampleRate !== SLICE_SAMPLE_RATE) {
    throw new AppError("unsupported", "unsupported_audio", `the stored audio is ${sampleRate} Hz; the job steps read 16 kHz PCM only`);
  }
  const seconds = samples / sampleRate;
  if (seconds > job.spec.maxAudioSeconds) throw audioTooLong(job.spec.maxAudioSeconds, seconds);
}

const SLICE_SAMPLE_RATE = 16_000;

/**
 * Little-endian PCM16 bytes as an Int16Array (hosts are little-endian): a view when the
 * bytes are aligned, as an object read's own buffer is, so a slice is not held twice
 * (a copy otherwise). Nothing writes to the samples it returns.
 */
export function toPcm(bytes: Buffer): Int16Array {
  const n = Math.floor(bytes.length / 2);
  if (bytes.byteOffset % 2 === 0) return new Int16Array(bytes.buffer, bytes.byteOffset, n);
  return new Int16Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + n * 2));
}
