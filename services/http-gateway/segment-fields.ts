import { speakerCount, speakerHintProblem, type DiarizeOptions } from "../../schemas/diarization";
import { keytermValues } from "../../schemas/keyterms";
import { redactList, type RedactEntity } from "../../schemas/redact";
import { issueErrorCode } from "../../schemas/safe-string";
import { segmentFields } from "../../schemas/segment";
import { AppError, validationError } from "../../shared/errors";
import { readBounded } from "./body-limit";
import type { ResponseFormat } from "./segment-formats";

/**
 * The segment route's multipart form (docs/segment-reference.md, "Request"): read within the upload
 * limit, then its fields parsed and checked (400 naming the field on a bad value).
 */
const FORM_FIELDS_ALLOWANCE = 64 * 1024;
const MAX_PROMPT_CHARS = 4000;

export interface SegmentFields {
  file: Blob;
  model: string;
  language?: string;
  prompt?: string;
  /** `keyterms` (repeated, comma-separated or a JSON array): recognition favours them (schemas/keyterms.ts). */
  keyterms?: string[];
  responseFormat: ResponseFormat;
  workerId?: string;
  /** OpenAI's `stream=true`: server-sent transcript.text.delta / transcript.text.done events. */
  stream: boolean;
  /** `timestamp_granularities[]` when given: verbose_json carries `words` only if "word" is asked for. */
  granularities?: ("word" | "segment")[];
  /** `smart_format` (default true): punctuation, casing and numerals for engines that lack them. */
  smartFormat: boolean;
  /** `redact` (repeated or comma-separated): entities replaced by their labels (docs/formatting.md). */
  redact?: RedactEntity[];
  /** `diarize=true` (or response_format=diarized_json) with its count hint: speaker labels (docs/diarization.md). */
  diarize?: DiarizeOptions;
  /** `multichannel` (default false): each channel transcribed on its own, results per channel and merged (docs/segment-reference.md "Multichannel"). */
  multichannel: boolean;
}

export function parseFields(form: FormData): SegmentFields {
  const file = form.get("file");
  if (file === null || typeof file === "string") {
    throw validationError("missing_file", "the `file` field (a file upload) is required", { param: "file", type: "invalid_request_error" });
  }
  const text = (name: string) => {
    const v = form.get(name);
    if (v === null) return undefined;
    if (typeof v !== "string") throw validationError("invalid_request", `\`${name}\` must be a text field`, { param: name });
    return v.trim() === "" ? undefined : v.trim();
  };
  const parsed = segmentFields.safeParse({
    model: text("model"),
    language: text("language"),
    prompt: text("prompt"),
    response_format: text("response_format"),
    worker_id: text("worker_id"),
  });
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    const param = issue.path.join(".");
    throw validationError(issueErrorCode(issue, param === "response_format" ? "invalid_response_format" : "invalid_request"), `${param}: ${issue.message}`, { param });
  }
  const f = parsed.data;
  const stream = parseBoolean("stream", text("stream"), false);
  if (stream && parseBoolean("multichannel", text("multichannel"), false)) {
    throw validationError("unsupported_combination", "stream and multichannel cannot be combined: a multichannel transcript is answered whole", { param: "stream" });
  }
  return {
    file,
    model: f.model,
    language: f.language,
    prompt: f.prompt?.slice(0, MAX_PROMPT_CHARS),
    responseFormat: f.response_format,
    workerId: f.worker_id,
    stream,
    smartFormat: parseBoolean("smart_format", text("smart_format"), true),
    multichannel: parseBoolean("multichannel", text("multichannel"), false),
    granularities: parseGranularities(form),
    redact: parseRedact(form),
    keyterms: parseKeyterms(form),
    ...parseDiarize(text, f.response_format === "diarized_json", stream, parseBoolean("multichannel", text("multichannel"), false)),
    ...refuseIncludes(form),
  };
}

/**
 * `diarize`, `speakers`, `min_speakers`, `max_speakers`: 400 `invalid_request` naming the
 * field on a bad value, `unsupported_combination` with `stream` (diarized_json) or
 * `multichannel`.
 */
function parseDiarize(text: (name: string) => string | undefined, diarizedJson: boolean, stream: boolean, multichannel: boolean): { diarize?: DiarizeOptions } {
  const on = parseBoolean("diarize", text("diarize"), false) || diarizedJson;
  const count = (name: string) => {
    const v = text(name);
    if (v === undefined) return undefined;
    const parsed = speakerCount(name).safeParse(/^\d{1,3}$/.test(v) ? Number(v) : Number.NaN);
    if (!parsed.success) throw validationError("invalid_request", parsed.error.issues[0]!.message, { param: name });
    return parsed.data;
  };
  const options: DiarizeOptions = {};
  for (const [field, key] of [["speakers", "speakers"], ["min_speakers", "minSpeakers"], ["max_speakers", "maxSpeakers"]] as const) {
    const n = count(field);
    if (n === undefined) continue;
    if (!on) throw validationError("invalid_request", `${field} needs diarize=true`, { param: field });
    options[key] = n;
  }
  if (!on) return {};
  if (stream && diarizedJson) throw validationError("unsupported_combination", "stream and response_format=diarized_json cannot be combined: a diarized transcript is answered whole", { param: "stream" });
  // each channel of a multichannel clip is usually one speaker: its `channel` says who spoke
  if (multichannel) throw validationError("unsupported_combination", "diarize and multichannel cannot be combined: with multichannel, each segment's channel says who spoke", { param: "diarize" });
  const problem = speakerHintProblem(options);
  if (problem) throw validationError("invalid_request", problem[1], { param: problem[0] });
  return { diarize: options };
}

function parseBoolean(name: string, value: string | undefined, absent: boolean): boolean {
  if (value === undefined) return absent;
  if (value === "true") return true;
  if (value === "false") return false;
  throw validationError("invalid_request", `${name}: must be true or false`, { param: name });
}

function parseKeyterms(form: FormData): string[] | undefined {
  const values = [...form.getAll("keyterms[]"), ...form.getAll("keyterms")];
  if (values.length === 0) return undefined;
  if (values.some((v) => typeof v !== "string")) throw validationError("invalid_request", "`keyterms` must be a text field", { param: "keyterms" });
  const parsed = keytermValues.safeParse(values);
  if (!parsed.success) throw validationError("invalid_request", `keyterms: ${parsed.error.issues[0]!.message.replace(/^keyterms: /, "")}`, { param: "keyterms" });
  return parsed.data.length ? parsed.data : undefined;
}

function parseRedact(form: FormData): RedactEntity[] | undefined {
  const values = repeated(form, "redact");
  if (values.length === 0) return undefined;
  const parsed = redactList.safeParse(values);
  if (!parsed.success) throw validationError("invalid_request", `redact: ${parsed.error.issues[0]!.message}`, { param: "redact" });
  return parsed.data;
}

/** All values of a repeated field, under its OpenAI name with or without `[]`. */
function repeated(form: FormData, name: string): string[] {
  return [...form.getAll(`${name}[]`), ...form.getAll(name)].map((v) => (typeof v === "string" ? v.trim() : "")).filter(Boolean);
}

function parseGranularities(form: FormData): ("word" | "segment")[] | undefined {
  const values = repeated(form, "timestamp_granularities");
  if (values.length === 0) return undefined;
  for (const v of values) {
    if (v !== "word" && v !== "segment") {
      throw validationError("invalid_request", `timestamp_granularities: ${JSON.stringify(v.slice(0, 40))} is not one of word, segment`, { param: "timestamp_granularities" });
    }
  }
  return values as ("word" | "segment")[];
}

/** `include[]` asks for extras (OpenAI: `logprobs`); none is produced here, so each is refused by name. */
function refuseIncludes(form: FormData): Record<string, never> {
  const values = repeated(form, "include");
  if (values.length > 0) {
    throw validationError("unsupported_include", `include: ${JSON.stringify(values[0]!.slice(0, 40))} is not supported by this server (no include values are)`, { param: "include" });
  }
  return {};
}

/** Reads the multipart body with a byte limit (413 before buffering more than that). */
export async function readForm(request: Request, contentType: string, maxFileBytes: number): Promise<FormData> {
  const limit = maxFileBytes + FORM_FIELDS_ALLOWANCE;
  const declared = Number(request.headers.get("content-length") ?? "NaN");
  if (Number.isFinite(declared) && declared > limit) throw fileTooLarge(maxFileBytes);
  const body = request.body ? await readBounded(request.body, limit) : new Uint8Array(0);
  if (body === undefined) throw fileTooLarge(maxFileBytes);
  let form: FormData;
  try {
    form = await new Response(body as Uint8Array<ArrayBuffer>, { headers: { "content-type": contentType } }).formData();
  } catch {
    throw validationError("invalid_multipart", "the multipart/form-data body could not be parsed", { type: "invalid_request_error" });
  }
  const file = form.get("file");
  if (file !== null && typeof file !== "string" && file.size > maxFileBytes) throw fileTooLarge(maxFileBytes);
  return form;
}

function fileTooLarge(maxFileBytes: number): AppError {
  return new AppError("too_large", "file_too_large", `the file is larger than the ${maxFileBytes}-byte upload limit`, {
    param: "file",
    type: "invalid_request_error",
  });
}
