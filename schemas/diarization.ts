import { z } from "zod";

/**
 * Diarization options (docs/diarization.md), shared by the segment form and the job
 * body: `diarize`, and optionally `speakers` (exactly) or `min_speakers`/`max_speakers`
 * (a range), each 1..MAX_SPEAKERS.
 */
const MAX_SPEAKERS = 10;

export const speakerCount = (name: string) =>
  z
    .number({ error: `${name} must be a whole number from 1 to ${MAX_SPEAKERS}` })
    .int(`${name} must be a whole number from 1 to ${MAX_SPEAKERS}`)
    .min(1, `${name} must be a whole number from 1 to ${MAX_SPEAKERS}`)
    .max(MAX_SPEAKERS, `${name} must be a whole number from 1 to ${MAX_SPEAKERS}`);

/** A request's speaker count hint, as a job's spec keeps it (present: diarize). */
export const diarizeOptions = z.object({
  speakers: z.number().int().min(1).max(MAX_SPEAKERS).optional(),
  minSpeakers: z.number().int().min(1).max(MAX_SPEAKERS).optional(),
  maxSpeakers: z.number().int().min(1).max(MAX_SPEAKERS).optional(),
});
export type DiarizeOptions = z.infer<typeof diarizeOptions>;

/** What is wrong with a count hint, as [field, message]; undefined when it is fine. */
export function speakerHintProblem(o: DiarizeOptions): [string, string] | undefined {
  if (o.speakers !== undefined && (o.minSpeakers !== undefined || o.maxSpeakers !== undefined)) return ["speakers", "speakers cannot be given with min_speakers or max_speakers"];
  if (o.minSpeakers !== undefined && o.maxSpeakers !== undefined && o.minSpeakers > o.maxSpeakers) return ["min_speakers", "min_speakers must not exceed max_speakers"];
  return undefined;
}
