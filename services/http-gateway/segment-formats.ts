import type { z } from "zod";
import type { segmentResponseFormat } from "../../schemas/segment";
import type { VerboseTranscription } from "../../schemas/transcription";

/**
 * The response formats of POST /v1/audio/transcriptions, as OpenAI serves them:
 * verbose_json (spec 2.8), json (`{text, usage}`), text (the text and a newline),
 * srt and vtt (one cue per segment).
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

/**
 * A multichannel transcript's cues say their channel (docs/segment.md "Multichannel"): SRT
 * has no speaker markup, so its text starts `[Channel 0] `; WebVTT has the voice tag, which
 * players show as the cue's speaker: `<v Channel 0>`.
 */
function cueLabel(channel: number | undefined, format: "srt" | "vtt"): string {
  if (channel === undefined) return "";
  return format === "srt" ? `[Channel ${channel}] ` : `<v Channel ${channel}>`;
}

function toSrt(result: VerboseTranscription): string {
  return result.segments
    .map((s, i) => `${i + 1}\n${clock(s.start, ",")} --> ${clock(s.end, ",")}\n${cueLabel(s.channel, "srt")}${s.text.trim()}\n\n`)
    .join("");
}

function toVtt(result: VerboseTranscription): string {
  return "WEBVTT\n\n" + result.segments.map((s) => `${clock(s.start, ".")} --> ${clock(s.end, ".")}\n${cueLabel(s.channel, "vtt")}${s.text.trim()}\n\n`).join("");
}
