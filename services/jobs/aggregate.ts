import { AppError } from "../../shared/errors";
import { getJson, putJson, type ObjectStore } from "../../shared/objects/index";
import { artifactKeys, chunkArtifact, type ChunkArtifact, type JobResult, type JobSegment } from "../../schemas/jobs";
import type { ActiveJob } from "../../domain/jobs/decider";
import { writeRedactedAudio } from "./redact-audio";

/**
 * The aggregation step: reads every `chunk_{i}.json`, merges them into one transcript
 * (spec 2.5/2.6) and writes `result.json`. Segment times are already absolute; the
 * merge orders them, renumbers ids from 0 and keeps starts monotonic.
 */
const round3 = (x: number) => Math.round(x * 1000) / 1000;

export function buildResult(job: ActiveJob, chunks: ChunkArtifact[]): JobResult {
  const ordered = [...chunks].sort((a, b) => a.index - b.index);
  const segments: JobSegment[] = [];
  let lastStart = 0;
  for (const chunk of ordered) {
    for (const s of [...chunk.segments].sort((a, b) => a.start_time - b.start_time)) {
      const start = Math.max(s.start_time, lastStart);
      const end = Math.max(s.end_time, start);
      const speaker = s.speaker === undefined ? {} : { speaker: s.speaker, ...(s.speaker_role === undefined ? {} : { speaker_role: s.speaker_role }) };
      segments.push({ id: segments.length, start_time: start, end_time: end, duration: round3(end - start), text: s.text, confidence: s.confidence, ...speaker });
      lastStart = start;
    }
  }
  const total = round3(job.audio?.durationSeconds ?? 0);
  const speech = round3(segments.reduce((acc, s) => acc + s.duration, 0));
  return {
    text: segments.map((s) => s.text).join(" "),
    segments,
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
