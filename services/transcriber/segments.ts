import type { TranscriptSegment, TranscriptWord } from "../../schemas/transcription";

/**
 * One verbose_json segment (OpenAI's field shape) spanning a non-empty run of words;
 * fields an engine has no value for take OpenAI's neutral defaults.
 */
export function segmentFromWords(id: number, words: TranscriptWord[], avgLogprob = 0): TranscriptSegment {
  return {
    id,
    seek: 0,
    start: words[0]!.start,
    end: words.at(-1)!.end,
    text: " " + words.map((w) => w.word).join(" "),
    tokens: [],
    temperature: 0,
    avg_logprob: avgLogprob,
    compression_ratio: 1,
    no_speech_prob: 0,
  };
}
