import { mkdtemp, open, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { ActiveJob } from "../../domain/jobs/decider";
import type { VerboseTranscription } from "../../schemas/transcription";
import { artifactKeys, type ChunkArtifact, type RedactedSpan } from "../../schemas/jobs";
import { wavParts } from "../../shared/audio/wav";
import type { ObjectStore } from "../../shared/objects/index";

/** Audio around a span also silenced: word times are the engine's estimate. */
const PAD_SECONDS = 0.05;
/** Bytes of the job's PCM read and written at a time: the audio is never held whole. */
const BLOCK_BYTES = 1 << 20;

/**
 * The redacted spans of one slice's shaped result (words carrying `entity`), in seconds
 * on the job's timeline: consecutive words of one entity make one span.
 */
export function redactedSpans(result: VerboseTranscription, startTime: number, endTime: number): RedactedSpan[] {
  const spans: RedactedSpan[] = [];
  let prev: string | undefined;
  for (const w of result.words) {
    if (!w.entity) {
      prev = undefined;
      continue;
    }
    const start = Math.min(endTime, startTime + w.start);
    const end = Math.min(endTime, startTime + w.end);
    const last = spans.at(-1);
    if (last && prev === w.entity) last.end_time = Math.max(last.end_time, end);
    else spans.push({ start_time: start, end_time: end, entity: w.entity });
    prev = w.entity;
  }
  return spans;
}

/**
 * `redact_audio: true` (docs/formatting.md "Redacted audio"): the job's 16-bit PCM with
 * every redacted span (padded by 50 ms) replaced by silence, written as
 * `redacted_audio.wav` beside result.json. Read and written a block at a time through a
 * temporary file, so a long file is never held whole.
 */
export async function writeRedactedAudio(job: ActiveJob, chunks: readonly ChunkArtifact[], objects: ObjectStore): Promise<void> {
  const audio = job.audio;
  if (!audio) return;
  const spans = chunks.flatMap((c) => c.redacted_spans ?? []).map((s) => [Math.max(0, Math.floor((s.start_time - PAD_SECONDS) * audio.sampleRate)) * 2, Math.ceil((s.end_time + PAD_SECONDS) * audio.sampleRate) * 2] as const);
  const bytes = audio.samples * 2;
  const dir = await mkdtemp(join(tmpdir(), "stt-redacted-"));
  const path = join(dir, "redacted_audio.wav");
  const file = await open(path, "w");
  try {
    const [header] = wavParts(new Int16Array(0), audio.sampleRate);
    header.writeUInt32LE(36 + bytes, 4);
    header.writeUInt32LE(bytes, 40);
    await file.write(header);
    for (let at = 0; at < bytes; at += BLOCK_BYTES) {
      const end = Math.min(bytes, at + BLOCK_BYTES);
      const block = Buffer.from((await objects.getRange(audio.audioKey, at, end)) ?? Buffer.alloc(end - at));
      for (const [from, to] of spans) if (from < end && to > at) block.fill(0, Math.max(0, from - at), Math.min(block.length, to - at));
      await file.write(block);
    }
    await file.close();
    await objects.putFile(artifactKeys.redactedAudio(job.spec), path, { contentType: "audio/wav" });
  } finally {
    await file.close().catch(() => undefined);
    await rm(dir, { recursive: true, force: true });
  }
}
