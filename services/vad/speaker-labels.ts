import { randomUUID } from "node:crypto";
import type { ServerEventOf } from "../../schemas/realtime";
import type { UtteranceCommand } from "../../schemas/realtime-internal";
import { createFrameClassifier } from "../../shared/audio/vad-frames";
import { emptyDiarization, itemFrames, labelItemTurns, speakerLabel, type OnlineBounds, type OnlineDiarization } from "../../domain/diarization/online";

/** The WebRTC VAD's aggressiveness for the frames a speaker is heard in: the offline diarizer's (domain/diarization/embedded.ts). */
const DIARIZER_AGGRESSIVENESS = 2;

/** A diarizing session's speakers (domain/diarization/online.ts) and the labelling of its items, one after another. */
export interface SessionSpeakers {
  state: OnlineDiarization;
  chain: Promise<unknown>;
}

/**
 * Live speaker labels (docs/diarization.md "Realtime sessions"): when the session
 * diarizes, the committed item's voiced frames are labelled against the session's
 * speakers before the item goes on to its transcript, so every path that ends it (the
 * streamed decoder, the final decoded ahead, the commit path) carries the same `speaker`
 * and, where the item holds a change of speaker, its runs (`speaker_turns`). Items are
 * labelled in the order they are committed (`chain`): a speaker first heard in one item
 * is known to the next. About 2 ms of CPU per second of speech (features and the VAD),
 * added to `io.spent` (the VAD counts it in the engine's cost per speaker, for admission);
 * the speakers after each item go to `io.saved` (kept for a replica that takes over).
 *
 * `merged`: the labels this item's labelling folded into earlier ones, as the
 * `conversation.speaker.merged` events the caller stores before the item's transcript
 * (each label is folded once in a session, so each event is said once).
 */
export function withSpeakers(
  session: { speakers: SessionSpeakers | null },
  settings: { diarize?: boolean; speakers?: number; max_speakers?: number; speaker_roles?: Record<string, string> },
  command: UtteranceCommand,
  pcm: Int16Array,
  io: { spent: { ms: number }; saved: (state: OnlineDiarization) => void },
): Promise<{ command: UtteranceCommand; merged: SpeakerMerged[] }> {
  const unlabelled = { command, merged: [] };
  if (!settings.diarize) return Promise.resolve(unlabelled);
  const sp = (session.speakers ??= { state: emptyDiarization(), chain: Promise.resolve() });
  const labelled = sp.chain.then(async () => {
    // the labelling runs on the event loop but for the classifier's creation: its time is its CPU
    const started = performance.now();
    const r = await labelItemAudio(sp.state, pcm, { speakers: settings.speakers, maxSpeakers: settings.max_speakers });
    io.spent.ms += performance.now() - started;
    sp.state = r.state;
    io.saved(r.state);
    const merged = r.merged.map((m): SpeakerMerged => ({ type: "conversation.speaker.merged", event_id: `evt_${randomUUID()}`, item_id: command.item_id, from: speakerLabel(m.from), into: speakerLabel(m.into) }));
    if (r.speaker === null) return { command, merged };
    const at = (seconds: number) => command.audio_start_ms + Math.round(seconds * 1000);
    const turns = r.turns.length > 1 ? { speaker_turns: r.turns.map((t) => ({ start_ms: at(t.start), end_ms: at(t.end), speaker: speakerLabel(t.speaker) })) } : {};
    const role = settings.speaker_roles?.[String(r.speaker)];
    return { command: { ...command, speaker: speakerLabel(r.speaker), ...(role ? { speaker_role: role } : {}), ...turns }, merged };
  });
  sp.chain = labelled.catch(() => undefined);
  // a labelling that fails leaves the item unlabelled, never untranscribed
  return labelled.catch(() => unlabelled);
}

type SpeakerMerged = ServerEventOf<"conversation.speaker.merged">;

/**
 * One committed item's speakers, as a diarizing session labels it: its voiced frames by
 * a WebRTC VAD of the item's own (a fresh classifier per item, so the labels do not
 * depend on the session's earlier audio, a resume or a takeover), then `labelItemTurns`.
 * bench/diarization.ts --online labels its items with this too.
 */
export async function labelItemAudio(state: OnlineDiarization, pcm: Int16Array, bounds: OnlineBounds): Promise<ReturnType<typeof labelItemTurns>> {
  const vad = await createFrameClassifier(DIARIZER_AGGRESSIVENESS);
  let frames;
  try {
    frames = itemFrames(pcm, vad.classify(pcm));
  } finally {
    vad.free();
  }
  return labelItemTurns(state, frames, bounds);
}
