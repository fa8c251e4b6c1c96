import type { TranscriptSegment, TranscriptWord, VerboseTranscription } from "../../schemas/transcription";
import type { TranscriptStage } from "./stage";

/**
 * Multichannel transcripts (issue 29; docs/segment-reference.md "Multichannel"): each channel of a
 * recording is transcribed on its own (a stereo call: agent on one channel, customer on
 * the other), and the channel it came from is a label every word and segment carries.
 *
 * The label is a pipeline stage (`channelStage`, last, after formatting and redaction),
 * so a channel's words are formatted, redacted and reviewed exactly as a mono clip's;
 * `mergeChannels` then puts the labelled channels into one transcript in time order,
 * keeping each channel's own as `channels[i]`. Everything here is pure.
 */

/** The most channels one request may ask to have transcribed apart (400 `too_many_channels` beyond). */
export const MAX_TRANSCRIBED_CHANNELS = 8;

/** The stage that labels every word of a run with its channel (it changes no form). */
export function channelStage(channel: number): TranscriptStage {
  const label = (words: Parameters<TranscriptStage["shape"]>[0]) => words.map((w) => ({ ...w, channel }));
  return { name: "channel", shape: label, shapeStreamed: label };
}

/** One channel's shaped transcript (its words and segments labelled by `channelStage`). */
export interface ChannelTranscript {
  channel: number;
  result: VerboseTranscription;
}

const byTime = <T extends { start: number; channel?: number }>(a: T, b: T) => a.start - b.start || (a.channel ?? 0) - (b.channel ?? 0);

/**
 * The channels as one transcription `durationSeconds` long: `segments` and `words` of
 * every channel in order of start (a tie goes to the lower channel), segments numbered
 * from 0, `text` the merged segments' texts joined; `channels` keeps each channel's own
 * text, segments (numbered per channel) and words. Every segment and word keeps its
 * `channel` (set here too, so a result shaped without stages is labelled all the same).
 */
export function mergeChannels(parts: readonly ChannelTranscript[], durationSeconds: number): VerboseTranscription {
  const ordered = [...parts].sort((a, b) => a.channel - b.channel);
  const channels = ordered.map(({ channel, result }) => ({
    channel,
    text: result.text,
    segments: result.segments.map((s): TranscriptSegment => ({ ...s, channel })),
    words: result.words.map((w): TranscriptWord => ({ ...w, channel })),
  }));
  const segments = channels
    .flatMap((c) => c.segments)
    .sort(byTime)
    .map((s, id) => ({ ...s, id }));
  const words = channels.flatMap((c) => c.words).sort(byTime);
  const text = segments.length
    ? segments
        .map((s) => s.text.trim())
        .filter(Boolean)
        .join(" ")
    : channels
        .map((c) => c.text.trim())
        .filter(Boolean)
        .join(" ");
  return {
    task: "transcribe",
    language: ordered.find((p) => p.result.language)?.result.language ?? "en",
    duration: durationSeconds,
    text,
    segments,
    words,
    channels,
  };
}
