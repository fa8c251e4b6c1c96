import type { ActiveJob } from "../../domain/jobs/decider";
import type { Diarizer, SpeakerTurn } from "../../domain/diarization/diarize";
import { embeddedDiarizer } from "../../domain/diarization/embedded";
import { artifactKeys, diarizationArtifact } from "../../schemas/jobs";
import { AppError } from "../../shared/errors";
import { getJson, putJson, type ObjectStore } from "../../shared/objects/index";
import { toPcm } from "./slice-audio";

/**
 * A job's speaker turns (`diarize`, docs/diarization.md), over its whole audio so a
 * speaker keeps one label across slices. `diarization.json` in the job's artifact folder
 * is the checkpoint: the first chunk step to need it diarizes `audio.pcm` (read 60 s at
 * a time) and writes it; the others, and any retry, read it. Two steps starting at once
 * may both diarize: the diarizer is deterministic, so both write the same turns.
 */
export async function jobSpeakerTurns(job: ActiveJob, objects: ObjectStore, diarizer: Diarizer = embeddedDiarizer): Promise<SpeakerTurn[]> {
  const audio = job.audio;
  if (!audio || !job.spec.diarize) return [];
  const key = artifactKeys.diarization(job.spec);
  const stored = diarizationArtifact.safeParse(await getJson(objects, key).catch(() => undefined));
  if (stored.success && stored.data.workflow_id === job.spec.workflowId) return stored.data.turns;
  const turns = await diarizer.diarize(
    {
      samples: audio.samples,
      read: async (from, to) => {
        const bytes = await objects.getRange(audio.audioKey, from * 2, to * 2);
        if (!bytes) throw new AppError("unavailable", "audio_missing", "the job's audio is not in object storage");
        return toPcm(bytes);
      },
    },
    job.spec.diarize,
  );
  await putJson(objects, key, { workflow_id: job.spec.workflowId, diarizer: diarizer.name, turns });
  return turns;
}

/** Turns overlapping [start, end), on the slice's timeline (0 = the slice's first sample). */
export function sliceTurns(turns: readonly SpeakerTurn[], start: number, end: number): SpeakerTurn[] {
  return turns.filter((t) => t.end > start && t.start < end).map((t) => ({ ...t, start: t.start - start, end: t.end - start }));
}
