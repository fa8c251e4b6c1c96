import type { z } from "zod";
import type { segmentResponseFormat } from "../../schemas/segment";
import type { DiarizedTranscription, VerboseTranscription } from "../../schemas/transcription";

/**
 * The response formats of POST /v1/audio/transcriptions, as OpenAI serves them:
 * verbose_json (spec 2.8), json (`{text, usage}`), text (the text and a newline),
 * srt and vtt (one cue per segment; with channels or speakers, each cue names its
 * channel or speaker: `[Speaker A] …` in SRT, a `<v Speaker A>` voice span in VTT), and diarized_json
 * (OpenAI's TranscriptionDiarized: segments with `speaker` "A", "B", …; docs/diarization.md).
 */
export type ResponseFormat = z.infer<typeof segmentResponseFormat>;

export interface Rendered {
  body: string;
  contentType: string;
}

export function renderTranscription(result: VerboseTranscription, format: ResponseFormat): Rendered {
  switch (format) {
    case "verbose_json":
      return { body: JSON.stringify(result), contentType: "application/json" };
    case "json":
      return {
        body: JSON.stringify({ text: result.text, usage: { type: "duration", seconds: Math.ceil(result.duration) } }),
        contentType: "application/json",
      };
    case "text":
      return { body: `${result.text}\n`, contentType: "text/plain; charset=utf-8" };
    case "srt":
      return { body: toSrt(result), contentType: "text/plain; charset=utf-8" };
    case "vtt":
      return { body: toVtt(result), contentType: "text/vtt; charset=utf-8" };
    case "diarized_json":
      return { body: JSON.stringify(toDiarized(result)), contentType: "application/json" };
    default: {
      const never: never = format;
      throw new Error(`unknown format ${String(never)}`);
    }
  }
}

function clock(seconds: number, separator: "," | "."): string {
  const ms = Math.max(0, Math.round(seconds * 1000));
  const h = Math.floor(ms / 3_600_000);
  const m = Math.floor((ms % 3_600_000) / 60_000);
  const s = Math.floor((ms % 60_000) / 1000);
  const pad = (n: number, w = 2) => String(n).padStart(w, "0");
  return `${pad(h)}:${pad(m)}:${pad(s)}${separator}${pad(ms % 1000, 3)}`;
}

type Segment = VerboseTranscription["segments"][number];

/** A speaker as diarized_json names it: "A", "B", … (OpenAI labels unnamed speakers so); "A" for a segment without one. */
const speakerLetter = (speaker: number | undefined) => String.fromCharCode(65 + ((speaker ?? 0) % 26));

/**
 * Who a cue is: its channel in a multichannel transcript (docs/segment-reference.md "Multichannel"),
 * its speaker with `diarize` (its role where `speaker_role` names it, else `Speaker A`;
 * docs/diarization.md). SRT has no speaker markup, so its text starts `[Channel 0] `;
 * WebVTT has the voice tag, which players show as the cue's speaker: `<v Channel 0>`.
 */
function cueLabel(s: Segment, format: "srt" | "vtt"): string {
  const who = s.channel !== undefined ? `Channel ${s.channel}` : s.speaker !== undefined ? (s.speaker_role ?? `Speaker ${speakerLetter(s.speaker)}`) : undefined;
  if (who === undefined) return "";
  return format === "srt" ? `[${who}] ` : `<v ${who.replace(/[<>&\n]/g, " ")}>`;
}

function toSrt(result: VerboseTranscription): string {
  return result.segments
    .map((s, i) => `${i + 1}\n${clock(s.start, ",")} --> ${clock(s.end, ",")}\n${cueLabel(s, "srt")}${s.text.trim()}\n\n`)
    .join("");
}

function toVtt(result: VerboseTranscription): string {
  return "WEBVTT\n\n" + result.segments.map((s) => `${clock(s.start, ".")} --> ${clock(s.end, ".")}\n${cueLabel(s, "vtt")}${s.text.trim()}\n\n`).join("");
}

function toDiarized(result: VerboseTranscription): DiarizedTranscription {
  return {
    task: "transcribe",
    duration: result.duration,
    text: result.text,
    segments: result.segments.map((s) => ({
      type: "transcript.text.segment",
      id: `seg_${s.id}`,
      start: s.start,
      end: s.end,
      speaker: speakerLetter(s.speaker),
      text: s.text.trim(),
    })),
    usage: { type: "duration", seconds: Math.ceil(result.duration) },
  };
}
