import { z } from "zod";

/**
 * The transcription result every worker returns, in OpenAI's `verbose_json` shape
 * (spec 2.8): text, language, duration, segments and words with times in seconds.
 */
export const transcriptWord = z.object({
  word: z.string(),
  start: z.number(),
  end: z.number(),
  /** 0..1 where the engine gives one. */
  probability: z.number().min(0).max(1).optional(),
  /**
   * The word as it reads in the formatted text (smart format: capitals, sentence
   * punctuation, numerals; like Deepgram's `punctuated_word`). Where several recognised
   * words became one form ("twenty five percent" → "25%") the first carries it and the
   * others are "". Absent when formatting was off or the engine formats itself.
   */
  punctuated_word: z.string().optional(),
  /** Redaction (`redact`): the entity this word was part of; `word` then shows `[entity]`, never what was said. */
  entity: z.string().optional(),
  /** Diarization (`diarize`): who said it, 0, 1, … in order of first turn (docs/diarization.md). */
  speaker: z.number().int().nonnegative().optional(),
  /** `multichannel=true`: the audio channel (0-based) the word was spoken on (docs/segment-reference.md "Multichannel"). */
  channel: z.number().int().nonnegative().optional(),
});
export type TranscriptWord = z.infer<typeof transcriptWord>;

export const transcriptSegment = z.object({
  id: z.number().int().nonnegative(),
  seek: z.number().int().nonnegative().default(0),
  start: z.number(),
  end: z.number(),
  text: z.string(),
  tokens: z.array(z.number().int()).default([]),
  temperature: z.number().default(0),
  avg_logprob: z.number().default(0),
  compression_ratio: z.number().default(1),
  no_speech_prob: z.number().min(0).max(1).default(0),
  /** Diarization: the segment's speaker (segments are split at speaker turns) and, where `metadata.speaker_roles` names it, its role. */
  speaker: z.number().int().nonnegative().optional(),
  speaker_role: z.string().optional(),
  /** `multichannel=true`: the audio channel (0-based) of the segment. */
  channel: z.number().int().nonnegative().optional(),
});
export type TranscriptSegment = z.infer<typeof transcriptSegment>;

export const verboseTranscription = z.object({
  task: z.literal("transcribe").default("transcribe"),
  language: z.string(),
  duration: z.number().nonnegative(),
  text: z.string(),
  segments: z.array(transcriptSegment),
  words: z.array(transcriptWord),
  /**
   * `multichannel=true`: each channel's own transcript, in channel order; the top-level
   * text, segments and words are then all channels merged in time order.
   */
  channels: z
    .array(z.object({ channel: z.number().int().nonnegative(), text: z.string(), segments: z.array(transcriptSegment), words: z.array(transcriptWord) }))
    .optional(),
});
export type VerboseTranscription = z.infer<typeof verboseTranscription>;

/**
 * `response_format=diarized_json` (OpenAI's TranscriptionDiarized; docs/diarization.md):
 * segments with a speaker letter, "A" for speaker 0.
 */
export const diarizedTranscription = z.object({
  task: z.literal("transcribe"),
  duration: z.number().nonnegative(),
  text: z.string(),
  segments: z.array(
    z.object({
      type: z.literal("transcript.text.segment"),
      id: z.string(),
      start: z.number(),
      end: z.number(),
      speaker: z.string(),
      text: z.string(),
    }),
  ),
  usage: z.object({ type: z.literal("duration"), seconds: z.number().nonnegative() }),
});
export type DiarizedTranscription = z.infer<typeof diarizedTranscription>;
