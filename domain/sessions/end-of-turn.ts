import type { Eagerness } from "../../schemas/realtime";
import type { ProsodyVerdict } from "./prosody";

/**
 * Semantic end of turn (`turn_detection.type: "semantic_vad"`): whether a pause in an
 * open utterance ends the speaker's turn, from how long the silence has lasted and how
 * complete the words so far look. A pure decision: the VAD (services/vad/turn-taking.ts)
 * asks it on every 30 ms frame of a pause and carries the answer out.
 *
 * How complete the words look comes from the streaming decoder's running hypothesis
 * read during the pause: the language model's probability that a sentence ends after
 * its last two words (log10 P(</s> | w1 w2); "… for them" ≈ -0.5, "… and the" ≈ -2.1 on
 * the en-us model), trusted only once the hypothesis has heard some of the pause and
 * its words have stopped changing. Words that look complete commit after a short
 * silence; words that look mid-sentence wait up to the bound; anything else (no
 * decoder, no words, words still moving) waits as long as server_vad's default silence
 * does at `medium`.
 *
 * The pitch before the pause (prosody.ts) moves that verdict one step: a fall to the
 * speaker's low makes it one step more complete, a final pitch held high one step less;
 * no reading leaves it as the words say. It weighs in once the words have been heard (or
 * when there are none to wait for). The first pass's last words are wrong about half
 * the time, so neither piece of evidence decides alone: words that look mid-sentence
 * before a fall become uncertain, not complete. Words that look complete before a fall
 * are `certain`: two independent cues agree, and the turn ends after the shortest wait. Docs: docs/realtime.md, "Semantic end of
 * turn".
 */

/** How long each verdict on the words waits (ms of silence), per eagerness. */
export interface TurnTiming {
  /** The words look like a finished sentence and the pitch falls to the speaker's low. */
  certainMs: number;
  /** The words look like a finished sentence (or uncertain words before a fall). */
  completeMs: number;
  /** No verdict (no hypothesis, no words, still changing, in between). */
  uncertainMs: number;
  /** The words look mid-sentence; also the bound on any pause. */
  maxMs: number;
}

/** `auto` is `medium`, as in OpenAI's semantic_vad. */
export const EAGERNESS_TIMING: Record<Exclude<Eagerness, "auto">, TurnTiming> = {
  high: { certainMs: 100, completeMs: 150, uncertainMs: 300, maxMs: 800 },
  medium: { certainMs: 160, completeMs: 240, uncertainMs: 500, maxMs: 1200 },
  low: { certainMs: 250, completeMs: 350, uncertainMs: 800, maxMs: 2000 },
};

export function timingOf(eagerness: Eagerness): TurnTiming {
  return EAGERNESS_TIMING[eagerness === "auto" ? "medium" : eagerness];
}

/** log10 P(</s> | last words) at or above this: the words look complete (10% and up). */
const COMPLETE_LOG10 = -1;
/** At or below this: the words look mid-sentence (2% and under: "… and the", "… of the", "… like to"). */
const INCOMPLETE_LOG10 = -1.7;
/** The hypothesis must have heard this much of the pause, and kept its words this long, to be judged. */
const MIN_HEARD_MS = 60;
/**
 * The pitch weighs in only once a pause has lasted this long: before, the words it moves
 * cannot have heard the pause, and a gap between two syllables is no verdict. The VAD
 * reads the pitch (a few ms of CPU) only for pauses this long (turn-taking.ts).
 */
export const PROSODY_AFTER_MS = MIN_HEARD_MS;
const MIN_STABLE_MS = 60;

/**
 * `endOfSentence` for engines with no language model to ask but punctuated words
 * (whisper.cpp, an OpenAI-compatible upstream, services/vad/redecode.ts): a sentence
 * mark on the last word reads as complete (log10 P = 0), a comma, colon, semicolon or
 * dash as mid-sentence (-2), no mark as no verdict (null).
 */
export function endOfSentenceFromMark(lastWord: string | undefined): number | null {
  if (!lastWord) return null;
  if (/[.?!]["')\]]*$/.test(lastWord)) return 0;
  if (/[,;:\u2014-]$/.test(lastWord)) return -2;
  return null;
}

/** The running hypothesis as last read during this pause. */
export interface PauseHypothesis {
  /** How many words it has (0: nothing recognised yet). */
  words: number;
  /** log10 P(</s> | its last two words); null when the model could not say. */
  endOfSentence: number | null;
  /** Audio (ms) its words have stayed the same, up to where it was read. */
  stableMs: number;
  /** Audio (ms) of the pause it had decoded when read (negative: read before the pause began). */
  heardMs: number;
}

export interface TurnInput {
  /** Silence so far in the open utterance (ms of audio since its last voiced frame). */
  silenceMs: number;
  eagerness: Eagerness;
  /** The latest hypothesis read, or null (no streaming decoder for this item). */
  hypothesis: PauseHypothesis | null;
  /** A read that will hear the pause is on its way: the words are coming. */
  readPending: boolean;
  /** The early signal was already given for this pause. */
  signalled: boolean;
  /** What the pitch of the last voiced audio before the pause says (`none`: nothing read). */
  prosody: ProsodyVerdict;
}

export type WordsVerdict = "certain" | "complete" | "uncertain" | "incomplete";

/** `words`: what the words and the pitch say together (`withProsody`). */
export type TurnDecision =
  /** End the utterance now, as silence ends it for server_vad. */
  | { kind: "commit"; words: WordsVerdict }
  /** Not yet over, but the turn may be (the optional early event); once per pause. */
  | { kind: "maybe_over"; words: WordsVerdict }
  | { kind: "wait" };

const STEPS: WordsVerdict[] = ["incomplete", "uncertain", "complete", "certain"];

/** The words' verdict moved one step by the pitch: falling toward certain, continuing toward incomplete. */
export function withProsody(words: WordsVerdict, prosody: ProsodyVerdict): WordsVerdict {
  const at = STEPS.indexOf(words);
  switch (prosody) {
    case "falling":
      return STEPS[Math.min(at + 1, STEPS.length - 1)]!;
    case "continuing":
      return STEPS[Math.max(at - 1, 0)]!;
    case "none":
      return words;
    default: {
      const never: never = prosody;
      return never;
    }
  }
}

/** What the words say about the turn: uncertain until a hypothesis has heard enough of the pause. */
export function judgeWords(h: PauseHypothesis | null): WordsVerdict {
  if (!heardPause(h)) return "uncertain";
  if (h.words === 0 || h.endOfSentence === null || h.stableMs < MIN_STABLE_MS) return "uncertain";
  if (h.endOfSentence >= COMPLETE_LOG10) return "complete";
  if (h.endOfSentence <= INCOMPLETE_LOG10) return "incomplete";
  return "uncertain";
}

function heardPause(h: PauseHypothesis | null): h is PauseHypothesis {
  return h !== null && h.heardMs >= MIN_HEARD_MS;
}

export function decideEndOfTurn(input: TurnInput): TurnDecision {
  const t = timingOf(input.eagerness);
  // the pitch weighs in once the words it moves have been heard (or there are none to wait for):
  // a fall alone, on the pause's first frame, is no verdict yet
  const heard = heardPause(input.hypothesis) || (input.hypothesis === null && !input.readPending && input.silenceMs >= PROSODY_AFTER_MS);
  const words = heard ? withProsody(judgeWords(input.hypothesis), input.prosody) : judgeWords(input.hypothesis);
  if (input.silenceMs >= t.maxMs) return { kind: "commit", words };
  // never decide on words not heard yet: while a read of the pause is on its way, wait
  // (up to the bound; a decoder that lags makes turns slower, not cut)
  if (input.readPending && !heardPause(input.hypothesis)) return { kind: "wait" };
  const needed = words === "certain" ? t.certainMs : words === "complete" ? t.completeMs : words === "uncertain" ? t.uncertainMs : t.maxMs;
  if (input.silenceMs >= needed) return { kind: "commit", words };
  // the early signal: when the next more confident verdict would have committed
  const early = words === "certain" || words === "complete" ? 0 : words === "uncertain" ? t.completeMs : t.uncertainMs;
  if (!input.signalled && input.silenceMs >= early) return { kind: "maybe_over", words };
  return { kind: "wait" };
}
