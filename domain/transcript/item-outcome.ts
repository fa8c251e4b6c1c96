import { randomUUID } from "node:crypto";
import type { ServerEvent } from "../../schemas/realtime";
import type { UtteranceCommand } from "../../schemas/realtime-internal";
import type { TranscribeResult } from "../../shared/workers/types";
import { completeItemAfterDeltas, type ItemTranscript } from "./item-transcript";
import { transcriptPipeline } from "./pipeline";
import { ITEM_CUTS } from "./redact";

/** Who decoded the item and what it cost, as `completed` reports it. */
export interface ItemDecodedBy {
  workerId: string;
  fallbackUsed: boolean;
  workerMs: number;
  queueMs: number;
}

/**
 * A realtime item's outcome events, on every path that ends one: its last `delta` (the
 * deltas sent before it and it add up to the transcript) and `completed`, with the words
 * on the session's timeline. The commit path (services/rt-transcriber), the streamed
 * decoder's end and a final decoded ahead of the commit (services/vad/stream-items.ts)
 * all end an item here, so `completed` has one shape whichever path decoded it.
 */
export function itemOutcomeEvents(command: Pick<UtteranceCommand, "item_id" | "audio_start_ms" | "audio_end_ms" | "speaker" | "speaker_role" | "speaker_turns">, item: ItemTranscript & { language: string }, by: ItemDecodedBy): ServerEvent[] {
  const base = { item_id: command.item_id, content_index: 0 as const };
  const turns = command.speaker_turns;
  return [
    { type: "conversation.item.input_audio_transcription.delta", event_id: `evt_${randomUUID()}`, ...base, delta: item.lastDelta },
    {
      type: "conversation.item.input_audio_transcription.completed",
      event_id: `evt_${randomUUID()}`,
      ...base,
      transcript: item.transcript,
      language: item.language,
      audio_start_ms: command.audio_start_ms,
      audio_end_ms: command.audio_end_ms,
      ...(command.speaker ? { speaker: command.speaker } : {}),
      ...(command.speaker_role ? { speaker_role: command.speaker_role } : {}),
      words: turns?.length ? item.words.map((w) => ({ ...w, speaker: speakerAt(turns, w.start_ms, w.end_ms) })) : item.words,
      worker_id: by.workerId,
      fallback_used: by.fallbackUsed,
      worker_ms: Math.round(by.workerMs),
      queue_ms: by.queueMs,
    },
  ];
}

/**
 * A committed item decoded whole (the commit path, or ahead of the commit): shaped with
 * the command's settings, the words its deltas sent kept (`emitted`), and its outcome.
 */
export function decodedItemEvents(command: UtteranceCommand, r: TranscribeResult, queueMs: number): ServerEvent[] {
  const c = command;
  const pipeline = transcriptPipeline({ smartFormat: c.smart_format, engineFormatted: r.formatted, prompt: c.prompt, keyterms: c.keyterms, redact: c.redact, cuts: ITEM_CUTS });
  // an utterance is a sentence's end at least (the VAD cut it at a pause)
  const item = completeItemAfterDeltas(pipeline, c.emitted, r.result, c.audio_start_ms);
  return itemOutcomeEvents(c, item, { workerId: r.workerId, fallbackUsed: r.fallbackUsed, workerMs: r.workerMs, queueMs });
}

/** The speaker of the run a word overlaps most, or the nearest run's (a word between two runs). */
function speakerAt(turns: NonNullable<UtteranceCommand["speaker_turns"]>, start: number, end: number): string {
  let best = turns[0]!;
  let score = -Infinity;
  for (const t of turns) {
    const overlap = Math.min(end, t.end_ms) - Math.max(start, t.start_ms);
    // no overlap: minus the distance to the run
    const s = overlap > 0 ? overlap : -Math.min(Math.abs(start - t.end_ms), Math.abs(t.start_ms - end));
    if (s > score) [best, score] = [t, s];
  }
  return best.speaker;
}
