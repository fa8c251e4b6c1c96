import type { VerboseTranscription } from "../../schemas/transcription";
import type { RedactEntity } from "../../schemas/redact";
import { channelStage } from "./channels";
import { redactRules, type AudioCuts } from "./redact";
import { redactStage } from "./redact-stage";
import { smartFormatStage } from "./smart-format-stage";
import { speakerAt, speakerRolesOf, speakerStage } from "./speaker-stage";
import type { SpeakerTurn } from "../diarization/diarize";
import type { ShapedWord, TranscriptStage } from "./stage";
import { termsFrom } from "./terms";

/**
 * The one way from an engine's words to the transcript users get, on every plane: the
 * segment route and the batch chunk step shape a whole result (`shapeTranscription`),
 * the realtime commit path an utterance's result, the realtime streamed path its
 * deltas and final (item-transcript.ts). Which stages run is decided here, once, from the
 * request's options.
 */
export interface TranscriptOptions {
  /** The request's `smart_format`; only `false` turns it off. */
  smartFormat?: boolean | null;
  /** The engine's text came formatted (the router's `formatted`, from its `formatsText`): formatting it again would do harm. */
  engineFormatted?: boolean;
  /** A job's metadata: its strings are the caller's vocabulary. */
  metadata?: unknown;
  /** The request's prompt: its names are the caller's vocabulary. */
  prompt?: string | null;
  /** The request's `keyterms`: each is the caller's vocabulary, as written. */
  keyterms?: readonly string[] | null;
  /** The request's `redact`: a redaction stage runs last, on every engine (formatted or not). */
  redact?: readonly RedactEntity[] | null;
  /** `multichannel=true`: the channel this audio is; a last stage labels every word and segment with it (channels.ts). */
  channel?: number;
  /**
   * Diarization (`diarize`, docs/diarization.md): the diarizer's turns on the words'
   * timeline. A speaker stage runs first; whole results get their segments split where
   * the speaker changes, and `metadata.speaker_roles` names the speakers in them.
   */
  speakerTurns?: readonly SpeakerTurn[] | null;
  /** Where this audio was cut out of a longer stream (a realtime item, a job's slice): redaction errs on the safe side there (redact.ts `AudioCuts`). */
  cuts?: AudioCuts;
}

export interface TranscriptPipeline {
  /** In order. None: the engine's result is delivered as it came. */
  readonly stages: readonly TranscriptStage[];
  /** With a speaker stage: its turns (for segments without words) and the roles that name speakers. */
  readonly speakers?: { readonly turns: readonly SpeakerTurn[]; readonly roles: ReadonlyMap<number, string> };
}

export function transcriptPipeline(options: TranscriptOptions): TranscriptPipeline {
  const stages: TranscriptStage[] = [];
  const terms = termsFrom(options.metadata, options.prompt, options.keyterms);
  const turns = options.speakerTurns;
  if (turns) stages.push(speakerStage(turns));
  if (options.smartFormat !== false && !options.engineFormatted) stages.push(smartFormatStage(terms));
  if (options.redact?.length) stages.push(redactStage(redactRules(options.redact, terms, options.cuts)));
  if (options.channel !== undefined) stages.push(channelStage(options.channel));
  return turns ? { stages, speakers: { turns, roles: speakerRolesOf(options.metadata) } } : { stages };
}

/** One run of words through every stage, as a whole (its last word ends a sentence). */
export function shapeRun(pipeline: TranscriptPipeline, words: readonly ShapedWord[]): ShapedWord[] {
  return pipeline.stages.reduce<ShapedWord[]>((run, stage) => stage.shape(run), [...words]);
}

/** A run's text: its non-empty forms, space-separated. */
const runText = (run: readonly ShapedWord[]): string =>
  run
    .map((w) => w.form)
    .filter((f) => f !== "")
    .join(" ");

/** Text without timings as a run (split on whitespace). */
const textRun = (text: string): ShapedWord[] =>
  text
    .split(/\s+/)
    .filter(Boolean)
    .map((word) => ({ word, form: word }));

/**
 * An engine's verbose_json as delivered (issue 16; docs/segment-reference.md "Formatting"): each
 * segment is one run of its own words (their pauses end sentences; the segment's end ends
 * one, as an utterance or slice end does), every word gains `punctuated_word`, and `text`
 * is the shaped segments joined. A segment without words is shaped from its text. Word
 * tokens and timings are kept as recognised (so word error rate is computed on the same
 * words as before), except redacted words, which show their label. Redaction reads all
 * the words at once, not segment by segment: a card number spoken with a pause that
 * ends a segment is still one number. With no stage the result is returned as it came.
 */
export function shapeTranscription(pipeline: TranscriptPipeline, result: VerboseTranscription): VerboseTranscription {
  if (pipeline.stages.length === 0) return result;
  const redact = pipeline.stages.find((s) => s.name === "redact");
  const speaker = pipeline.stages.find((s) => s.name === "speaker");
  const perRun: TranscriptPipeline = { stages: pipeline.stages.filter((s) => s !== redact && s !== speaker) };
  let shaped: ShapedWord[] = result.words.map((w) => ({ word: w.word, start_ms: Math.round(w.start * 1000), end_ms: Math.round(w.end * 1000), form: w.word }));
  if (speaker) shaped = speaker.shape(shaped);
  const taken = new Set<number>();
  // a segment without words: its text shaped as a run (the labels its words got are its own)
  const fromText = new Map<number, ShapedWord[]>();
  const groups = result.segments.map((s, j): number[] | string => {
    const mine: number[] = [];
    result.words.forEach((w, i) => {
      if (!taken.has(i) && w.start >= s.start - 0.01 && w.start < s.end + 0.01) mine.push(i);
    });
    if (mine.length === 0) {
      const run = shapeRun(pipeline, textRun(s.text));
      fromText.set(j, run);
      return runText(run);
    }
    for (const i of mine) taken.add(i);
    return mine;
  });
  // with speakers, a segment is cut where its words' speaker changes, before formatting: each turn is its own run
  const pieces = result.segments.flatMap((s, j) =>
    (pipeline.speakers ? splitAtSpeakers(s, groups[j]!, shaped, pipeline.speakers) : [{ segment: s, group: groups[j]! }]).map((p) => ({ ...p, j })),
  );
  // words no segment claimed (an engine whose segments do not cover its words) get a form too
  const rest = result.words.map((_, i) => i).filter((i) => !taken.has(i));
  const runs = [...pieces.map((p) => p.group).filter((g): g is number[] => Array.isArray(g)), rest].filter((r) => r.length > 0);
  const apply = (indices: readonly number[], out: readonly ShapedWord[]) => indices.forEach((i, k) => (shaped[i] = out[k]!));
  for (const run of runs) apply(run, shapeRun(perRun, run.map((i) => shaped[i]!)));
  if (redact) {
    const all = runs.flat();
    apply(all, redact.shape(all.map((i) => shaped[i]!)));
  }
  // only a speaker stage: the engine's own text and forms stand
  const reshaped = pipeline.stages.some((s) => s !== speaker);
  const words = result.words.map((w, i) => {
    const { form, entity, channel, speaker: who } = shaped[i]!;
    const labelled = { ...w, ...(channel === undefined ? {} : { channel }), ...(who === undefined ? {} : { speaker: who }) };
    if (!reshaped) return labelled;
    return entity ? { ...labelled, word: `[${entity}]`, punctuated_word: form, entity } : { ...labelled, punctuated_word: form };
  });
  const labelStage = pipeline.stages.find((s) => s.name === "channel");
  const segments = pieces.map(({ segment: s, group: g, whole, j }, id) => {
    const run = typeof g === "string" ? (fromText.get(j) ?? []) : g.map((i) => shaped[i]!);
    // a segment's label is its words' (a segment shaped from empty text asks the stage)
    const channel = run[0]?.channel ?? labelStage?.shape([{ word: "", form: "" }])[0]?.channel;
    // an uncut segment keeps the engine's text when no stage reshapes it
    const text = !reshaped && whole ? s.text : typeof g === "string" ? g : runText(run);
    const numbered = pipeline.speakers ? { ...s, id, text } : { ...s, text };
    return channel === undefined ? numbered : { ...numbered, channel };
  });
  const text = segments.length
    ? segments
        .map((s) => s.text.trim())
        .filter(Boolean)
        .join(" ")
    : runText(shapeRun(pipeline, textRun(result.text)));
  return { ...result, text, segments, words };
}

type Segment = VerboseTranscription["segments"][number];

/**
 * A segment cut where its words' speaker changes (each piece keeps the segment's other
 * fields; the first starts and the last ends where the segment did), labelled with the
 * speaker and, where named, the role. A segment without words takes the speaker of the
 * turn it overlaps most. `whole`: the segment was not cut.
 */
function splitAtSpeakers(
  s: Segment,
  group: number[] | string,
  shaped: readonly ShapedWord[],
  speakers: NonNullable<TranscriptPipeline["speakers"]>,
): { segment: Segment; group: number[] | string; whole?: boolean }[] {
  const named = (seg: Segment, speaker: number | undefined): Segment => {
    if (speaker === undefined) return seg;
    const role = speakers.roles.get(speaker);
    return role === undefined ? { ...seg, speaker } : { ...seg, speaker, speaker_role: role };
  };
  if (typeof group === "string") return [{ segment: named(s, speakerAt(speakers.turns, s.start, s.end)), group, whole: true }];
  const runs: number[][] = [];
  for (const i of group) {
    const last = runs[runs.length - 1];
    if (last && shaped[last[0]!]!.speaker === shaped[i]!.speaker) last.push(i);
    else runs.push([i]);
  }
  return runs.map((run, k) => {
    const first = shaped[run[0]!]!;
    const last = shaped[run[run.length - 1]!]!;
    const start = k === 0 ? s.start : (first.start_ms ?? 0) / 1000;
    const end = k === runs.length - 1 ? s.end : (last.end_ms ?? 0) / 1000;
    return { segment: named({ ...s, start, end }, first.speaker), group: run, whole: runs.length === 1 };
  });
}

/**
 * A segment's text as a reviewer corrected it (docs/jobs-reference.md "Review"), under the same
 * pipeline's redaction: a correction that drops a label the text had is refused (the
 * reviewer never un-redacts: `undefined`), and what it adds is redacted like the rest.
 * Without a redaction stage the correction stands as given.
 */
export function correctedText(pipeline: TranscriptPipeline, original: string, corrected: string): string | undefined {
  if (!pipeline.stages.some((s) => s.name === "redact")) return corrected;
  const labels = original.match(/\[[A-Z_]+\]/g) ?? [];
  const shaped = runText(shapeRun(pipeline, textRun(corrected)));
  const kept = shaped.match(/\[[A-Z_]+\]/g) ?? [];
  return labels.every((l) => kept.filter((k) => k === l).length >= labels.filter((x) => x === l).length) ? shaped : undefined;
}
