import type { Context } from "hono";
import type { VerboseTranscription } from "../../schemas/transcription";
import type { AppError } from "../../shared/errors";
import type { GatewayEnv } from "./auth-middleware";
import type { PieceOutcome, PiecesRun } from "../../shared/workers/pieces-run";

/**
 * OpenAI's streamed transcription (`stream=true`): server-sent `transcript.text.delta`
 * events, then `transcript.text.done` with the whole text and the usage. A clip decoded
 * as pieces (shared/workers/pieces-run.ts) streams its text in clip order as soon as a piece and
 * every piece before it are transcribed; a single-piece clip streams once it is. Each
 * delta is one segment's shaped text, with the space that joins it to the one before,
 * so the deltas joined are the done event's text. The pieces so far are shaped as one
 * transcript, as the done event's is, and the segments a later piece could still change
 * wait for it (settled.ts): a card number spoken across a pause at a cut is redacted
 * whole, never let out group by group.
 *
 * The response starts with the first piece (a failure before it is an ordinary error
 * answer). A piece failing later ends the stream with an `error` event in OpenAI's
 * envelope (`{"type":"error","error":{message,type,code}}`; the openai SDK throws it)
 * instead of the done event, and nothing is billed.
 */
export interface StreamedPieces {
  run: PiecesRun;
  first: PieceOutcome;
  /** The segment texts of the pieces so far that no later piece can change (settled.ts). */
  settled(pieces: PieceOutcome[]): string[];
  /** Every piece is in: stitch, shape, bill and audit; the delivered transcript. */
  finish(pieces: PieceOutcome[]): Promise<VerboseTranscription>;
  /** A piece failed: give the budget back, audit; the error to report. */
  fail(err: unknown): Promise<AppError>;
  /** The stream is over, however it ended: the clip's PCM may go. */
  end(): void;
}

export function streamPieces(c: Context<GatewayEnv>, s: StreamedPieces): Response {
  const encoder = new TextEncoder();
  const event = (data: unknown) => encoder.encode(`data: ${JSON.stringify(data)}\n\n`);
  let open = true;
  const produce = async (controller: ReadableStreamDefaultController<Uint8Array>) => {
    const send = (data: unknown) => {
      if (open) controller.enqueue(event(data));
    };
    let sent = 0;
    const emit = (texts: readonly string[]) => {
      for (const part of texts.slice(sent)) send({ type: "transcript.text.delta", delta: sent++ === 0 ? part : ` ${part}` });
    };
    try {
      const pieces = [s.first];
      for (let i = 1; i < s.run.count; i++) {
        emit(s.settled(pieces));
        pieces.push(await s.run.piece(i));
      }
      const result = await s.finish(pieces);
      emit(segmentTexts(result));
      send({ type: "transcript.text.done", text: result.text, usage: { type: "duration", seconds: Math.ceil(result.duration) } });
    } catch (err) {
      const e = await s.fail(err);
      send({ type: "error", error: { message: e.message, type: e.type ?? (e.status >= 500 ? "server_error" : "invalid_request_error"), code: e.code, param: e.param ?? null } });
    } finally {
      s.end();
      if (open) controller.close();
      open = false;
    }
  };
  const body = new ReadableStream<Uint8Array>({
    start(controller) {
      void produce(controller);
    },
    cancel() {
      // the client went away: the HTTP request's signal stops the pieces
      open = false;
    },
  });
  c.header("Content-Type", "text/event-stream; charset=utf-8");
  c.header("Cache-Control", "no-store");
  return c.body(body, 200);
}

/** A transcription's text segment by segment (its whole text when it has no segments). */
function segmentTexts(r: VerboseTranscription): string[] {
  const parts = r.segments.length ? r.segments.map((s) => s.text.trim()) : [r.text.trim()];
  return parts.filter(Boolean);
}
