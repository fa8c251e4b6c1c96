import type { EntityLabel } from "./redact";

/**
 * A word on its way from the engine to the delivered transcript. `word` is as recognised
 * and never changes (word error rate, the alignment of streamed words and the words list
 * read it); `form` is how the transcript shows it so far: the first stage gets `word`,
 * each later stage what the one before gave.
 */
export interface ShapedWord {
  readonly word: string;
  /** Milliseconds, where the engine gave times (a segment shaped from its text has none). */
  readonly start_ms?: number;
  readonly end_ms?: number;
  /** "" where the form of a word before it took it in ("twenty five" → "25", ""). */
  readonly form: string;
  /** Set by the redaction stage on every word of a redacted span: the delivered word shows `[entity]`, never what was said. */
  readonly entity?: EntityLabel;
  /** Set by the speaker stage (speaker-stage.ts): who said the word. */
  readonly speaker?: number;
  /** Set by the channel stage (channels.ts): the audio channel the word was spoken on. */
  readonly channel?: number;
}

/**
 * One step of the transcript pipeline (pipeline.ts): speaker labels (speaker-stage.ts,
 * with `diarize`), smart format, redaction, then channel labels (channels.ts, with
 * `multichannel`), each written once and used by every plane. A stage sees one run of words at a time (a segment, an
 * utterance, a streamed item) and returns the same words in the same order, `word` and
 * times kept; a stage that labels words (speaker, channel) adds its field to
 * `ShapedWord` and the pipeline carries it to the delivered words.
 *
 * Streamed items (item-transcript.ts) and streamed segment pieces (settled.ts) are sent in append-only deltas, so each stage says twice
 * what it does: `shape` for a whole run, and `shapeStreamed` for words going out
 * mid-utterance, which no later word may change. A stage cannot leave the streamed case
 * out: a redaction stage that let a number out in a delta could not take it back.
 */
export interface TranscriptStage {
  /** For logs and tests. */
  readonly name: string;
  /** A whole run, whose last word ends a sentence (an utterance, segment or slice end). */
  shape(words: readonly ShapedWord[]): ShapedWord[];
  /**
   * Words going out in a delta, after `before` words of the item already sent: only what
   * no later word can change. The item's final runs `shape` over all its words, and the
   * words already sent keep the forms they went out with. `sent` are those words as
   * recognised (context for a stage that needs it). A stage may return fewer words than it
   * got (a prefix): the rest are held back until later words decide them (redaction's
   * open digit run), and are offered again.
   */
  shapeStreamed(words: readonly ShapedWord[], before: number, sent?: readonly string[]): ShapedWord[];
  /** How many of the last of these words (as recognised) the stage would hold back from a stream, because later words may still change them (redaction's open digit run). None when absent. */
  held?(words: readonly string[]): number;
}
