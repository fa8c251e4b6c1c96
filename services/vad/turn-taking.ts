import type { DeciderInput } from "../../domain/sessions/decider";
import { decideEndOfTurn, PROSODY_AFTER_MS, type PauseHypothesis } from "../../domain/sessions/end-of-turn";
import { judgeProsody, pauseProsody, REFERENCE_MS, type ProsodyVerdict } from "../../domain/sessions/prosody";
import { trackPitch } from "../../shared/audio/pitch";
import { msToSamples, VAD_SAMPLE_RATE } from "../../shared/audio/vad";
import type { Logger } from "../../shared/logger";
import type { OpenStream, SessionState } from "./session-state";
import { noteHeard } from "./stream-items";

/**
 * semantic_vad in the VAD: on every 30 ms frame of a pause in an open utterance, the
 * running hypothesis is read again (every PAUSE_READ_MS of pause, so the decider knows
 * whether the words stopped changing), and the pure decider (domain/sessions/end-of-turn.ts)
 * says whether the turn is over, from the silence, the words and the pitch of the last
 * voiced audio (read once when the pause begins: the pitch of its last REFERENCE_MS,
 * about 3 ms of CPU). Its answer becomes a session-decider input:
 *
 * - commit: the segmenter ends the utterance as enough silence would (`endTurn`), and
 *   the utterance goes on as any VAD commit (committed, the streamed final);
 * - maybe over: `turn_end_likely` (an event only with `early_turn_events`), once per pause;
 *   speech after it: `turn_resumed`.
 *
 * The segmenter's own silence is set to the eagerness's bound (session-state.ts
 * `segmenterSettings`), so a pause ends there whatever the words. server_vad sessions
 * never get here. The turn is decided on every frame and again when a pause's read is
 * answered (handle-entry.ts `reconsiderTurn`), always on the silence the frames so far
 * hold: never on words not heard, never on time that has not passed on the audio. What a
 * pause's hypothesis says depends on when it was read, so unlike server_vad's cut a
 * redelivered pause may be cut elsewhere (item ids still come from the audio).
 */

/** How often the hypothesis is read during a pause (ms of audio). */
const PAUSE_READ_MS = 60;

const toMs = (samples: number) => (samples * 1000) / VAD_SAMPLE_RATE;

/** The decider input a frame of a semantic_vad session calls for, or null. */
export function watchTurn(state: SessionState, log: Logger, onHeard: () => void): DeciderInput | null {
  const t = state.decider.settings.turn_detection;
  if (t.type !== "semantic_vad") return null;
  if (!state.seg.speaking) {
    state.turnSignalled = null; // the utterance ended (its bound, a commit): a new one starts afresh
    return null;
  }
  const pause = state.seg.pause;
  if (!pause) {
    const at = state.turnSignalled;
    if (at === null) return null;
    state.turnSignalled = null;
    return { kind: "turn_resumed", atSample: state.seg.position };
  }
  const s = state.stream && state.stream.item === state.decider.currentItem && !state.stream.utt.lost ? state.stream : null;
  if (s) readDuringPause(s, onHeard);
  const h = s?.heard;
  const hypothesis: PauseHypothesis | null =
    h && h.readAt >= 0 ? { words: h.words, endOfSentence: h.endOfSentence, stableMs: toMs(h.readAt - h.changedAt), heardMs: toMs(h.readAt - pause.fromSample) } : null;
  // a read in flight: once answered, the next one hears more of the pause
  const readPending = h?.pendingAt != null;
  // most pauses inside speech are a frame or two: the pitch is read only where it can count
  const prosody = toMs(pause.samples) >= PROSODY_AFTER_MS ? prosodyBefore(state, pause.fromSample) : "none";
  const d = decideEndOfTurn({ silenceMs: toMs(pause.samples), eagerness: t.eagerness ?? "auto", hypothesis, readPending, signalled: state.turnSignalled === pause.fromSample, prosody });
  if (d.kind !== "wait") {
    log.debug("end of turn", { decision: d.kind, verdict: d.words, prosody, silenceMs: toMs(pause.samples), hypothesis: h?.text.split(" ").slice(-3).join(" "), ...hypothesis, readPending });
  }
  switch (d.kind) {
    case "commit":
      state.turnSignalled = null;
      return { kind: "audio", vad: state.seg.endTurn() };
    case "maybe_over":
      state.turnSignalled = pause.fromSample;
      return { kind: "turn_end_likely", atSample: pause.fromSample, transcript: h?.text ?? "" };
    case "wait":
      return null;
    default: {
      const never: never = d;
      return never;
    }
  }
}

/** Reads the hypothesis again every PAUSE_READ_MS of pause, one read in flight at a time; `onHeard` when one is answered. */
function readDuringPause(s: OpenStream, onHeard: () => void) {
  const h = s.heard;
  if (h.pendingAt !== null || s.fed - Math.max(h.readAt, 0) < msToSamples(PAUSE_READ_MS)) return;
  const readAt = s.fed;
  h.pendingAt = readAt;
  s.utt.hypothesis().then(
    (hyp) => {
      if (s.ended) return;
      noteHeard(s, hyp, readAt);
      onHeard();
    },
    () => {
      s.heard.pendingAt = null; // a lost decoder: the commit takes the fallback, the pause its bound
    },
  );
}

/** What the pitch before the pause starting at `pauseAt` says; tracked on its first frame, kept for the rest of it. */
function prosodyBefore(state: SessionState, pauseAt: number): ProsodyVerdict {
  if (state.turnProsody?.at === pauseAt) return state.turnProsody.verdict;
  const tail = state.seg.openTail(pauseAt - msToSamples(REFERENCE_MS));
  const voiced = tail ? pauseAt - tail.from : 0;
  const verdict = tail && voiced > 0 ? judgeProsody(pauseProsody(trackPitch(tail.pcm.subarray(0, voiced)), voiced)) : "none";
  state.turnProsody = { at: pauseAt, verdict };
  return verdict;
}
