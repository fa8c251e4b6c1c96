import { AppError } from "../../shared/errors";
import { getJson, putJson, type ObjectStore } from "../../shared/objects/index";
import { artifactKeys, chunkArtifact, type ChunkArtifact, type JobResult, type JobSegment } from "../../schemas/jobs";
import type { ActiveJob } from "../../domain/jobs/decider";
import { redactJoined } from "../../domain/transcript/joined";
import { writeRedactedAudio } from "./redact-audio";

/**
 * The aggregation step: reads every `chunk_{i}.json`, merges them into one transcript
 * (spec 2.5/2.6) and writes `result.json`. Segment times are already absolute; the
 * merge orders them, renumbers ids from 0 and keeps starts monotonic.
 *
 * Multichannel (docs/jobs-reference.md "Multichannel"): the channels' segments are merged in order
 * of start (a tie goes to the lower channel) and each keeps its `channel`; starts are kept
 * monotonic within a channel only (two channels speak at once), and `channels` holds each
 * channel's text and segments, with the merged ids.
 */
const round3 = (x: number) => Math.round(x * 1000) / 1000;

export function buildResult(job: ActiveJob, chunks: ChunkArtifact[]): JobResult {
  const ordered = [...chunks].sort((a, b) => a.index - b.index);
  const placed: Omit<JobSegment, "id">[] = [];
  const lastStart = new Map<number | undefined, number>();
  for (const chunk of redactedOverSlices(job, ordered)) {
    for (const s of [...chunk.segments].sort((a, b) => a.start_time - b.start_time)) {
      const start = Math.max(s.start_time, lastStart.get(chunk.channel) ?? 0);
      const end = Math.max(s.end_time, start);
      const channel = chunk.channel === undefined ? {} : { channel: chunk.channel };
      const speaker = s.speaker === undefined ? {} : { speaker: s.speaker, ...(s.speaker_role === undefined ? {} : { speaker_role: s.speaker_role }) };
      placed.push({ start_time: start, end_time: end, duration: round3(end - start), text: s.text, confidence: s.confidence, ...channel, ...speaker });
      lastStart.set(chunk.channel, start);
    }
  }
  const multichannel = job.audio?.channels !== undefined;
  if (multichannel) placed.sort((a, b) => a.start_time - b.start_time || (a.channel ?? 0) - (b.channel ?? 0));
  const segments: JobSegment[] = placed.map((s, id) => ({ id, ...s }));
  const total = round3(job.audio?.durationSeconds ?? 0);
  const speech = round3(segments.reduce((acc, s) => acc + s.duration, 0));
  return {
    text: segments.map((s) => s.text).join(" "),
    segments,
    ...(multichannel ? { channels: channelViews(segments, job.audio!.channels!) } : {}),
    summary: {
      total_duration: total,
      total_speech_duration: speech,
      overall_speech_ratio: total > 0 ? round3(Math.min(1, speech / total)) : 0,
      num_segments: segments.length,
    },
    metadata: {
      language: job.spec.language ?? ordered.find((c) => c.language)?.language ?? "en",
      model: job.spec.model,
      chunk_count: job.chunks?.length ?? ordered.length,
      audio_duration_seconds: total,
      request_id: job.spec.requestId,
      workflow_id: job.spec.workflowId,
    },
  };
}

/**
 * With `redact`: the chunks' segments redacted again over the whole transcript, channel
 * by channel (joined.ts): a slice was redacted alone, so a number dictated across the
 * pause where the job was sliced is redacted here. The chunk artifacts keep their own
 * texts (each redacted at its cuts already).
 */
function redactedOverSlices(job: ActiveJob, ordered: readonly ChunkArtifact[]): ChunkArtifact[] {
  if (!job.spec.redact?.length) return [...ordered];
  const out = ordered.map((c) => ({ ...c, segments: [...c.segments].sort((a, b) => a.start_time - b.start_time) }));
  for (const channel of new Set(out.map((c) => c.channel))) {
    const mine = out.filter((c) => c.channel === channel);
    const segments = mine.flatMap((c) => c.segments.map((s, i) => ({ chunk: c, i, cutBefore: i === 0 })));
    const texts = redactJoined(
      segments.map(({ chunk, i, cutBefore }) => ({ text: chunk.segments[i]!.text, cutBefore })),
      job.spec.redact,
      job.spec.metadata,
      job.spec.prompt,
      job.spec.keyterms,
    );
    segments.forEach(({ chunk, i }, k) => (chunk.segments[i] = { ...chunk.segments[i]!, text: texts[k]! }));
  }
  return out;
}

/** Each channel's text and segments out of the merged, labelled segments (channels with no speech included). */
export function channelViews(segments: readonly JobSegment[], channels: number): NonNullable<JobResult["channels"]> {
  return Array.from({ length: channels }, (_, channel) => {
    const mine = segments.filter((s) => s.channel === channel);
    return { channel, text: mine.map((s) => s.text).join(" "), segments: mine };
  });
}

async function readChunkArtifacts(job: ActiveJob, objects: ObjectStore): Promise<ChunkArtifact[]> {
  const out: ChunkArtifact[] = [];
  for (const chunk of job.chunks ?? []) {
    const parsed = chunkArtifact.safeParse(await getJson(objects, artifactKeys.chunk(job.spec, chunk.index)));
    if (!parsed.success || parsed.data.workflow_id !== job.spec.workflowId) {
      throw new AppError("unavailable", "checkpoint_missing", `chunk_${chunk.index}.json is missing or unreadable`);
    }
    out.push(parsed.data);
  }
  return out;
}

export async function aggregateTranscript(job: ActiveJob, objects: ObjectStore): Promise<JobResult> {
  const chunks = await readChunkArtifacts(job, objects);
  const result = buildResult(job, chunks);
  // before result.json: a job whose result exists has its redacted audio too
  if (job.spec.redactAudio) await writeRedactedAudio(job, chunks, objects);
  await putJson(objects, artifactKeys.result(job.spec), result);
  return result;
}
