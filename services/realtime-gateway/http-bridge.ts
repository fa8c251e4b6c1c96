import { STATUS_CODES } from "node:http";
import type { HttpRequest, HttpResponse } from "@trufflesuite/uws-js-unofficial";
import { concatBytes } from "../../shared/bytes";
import { AppError } from "../../shared/errors";
import { decideBridge } from "./http-bridge-request";

export { decideBridge };

/** What the bridge hands the app besides the request (hono's `c.env`). */
interface BridgeEnv {
  /** The TCP peer's address (authentication throttling keys on the client's address). */
  remoteAddress: string;
}

export type FetchHandler = (request: Request, env: BridgeEnv) => Response | Promise<Response>;

/** Responses up to this size are sent in one write with a Content-Length. */
const SINGLE_WRITE_BYTES = 256 * 1024;

const statusLine = (status: number) => `${status} ${STATUS_CODES[status] ?? "Unknown"}`;

/**
 * The envelope of an answer the bridge gives itself. Admin paths use the admin shape,
 * every other path OpenAI's, like the hono app's own errors.
 */
function bridgeErrorBody(path: string, status: number, code: string, message: string): string {
  if (path.startsWith("/v1/external-transcription")) return JSON.stringify({ ok: false, error: { code, message, retryable: false } });
  return JSON.stringify({ error: { message, type: status >= 500 ? "server_error" : "invalid_request_error", code, param: null } });
}

/**
 * The one-port bridge: a plain HTTP request arriving on the uWS listener becomes a
 * WHATWG Request for the hono app's `fetch`, and its Response is written back. The
 * request body streams in (uWS hands chunks that must be copied), the response body
 * streams out honouring uWS backpressure, and a client abort cancels both.
 *
 * Nothing here may throw out of a uWS callback (that ends the process): hostile
 * request lines are refused by `decideBridge`, and every write goes through
 * `whileOpen`, which checks that the response is still ours.
 */
export function bridgeToFetch(fetch: FetchHandler, res: HttpResponse, req: HttpRequest, onError?: (err: unknown) => void): void {
  const controller = new AbortController();
  const state: ResponseState = { aborted: false, ended: false, bodyDone: true };
  res.onAborted(() => {
    state.aborted = true;
    controller.abort();
    // uWS reports a connection that ended mid-body (the client closed or half-closed it:
    // uWS closes on FIN, so nothing can be answered) only here: fail the body, or the
    // route would wait for the rest forever, holding what had arrived.
    if (!state.bodyDone) failBody(bodyCutShort("the connection closed"));
  });

  // HttpRequest is only valid synchronously: read everything now.
  const path = req.getUrl();
  const env: BridgeEnv = { remoteAddress: Buffer.from(res.getRemoteAddressAsText()).toString() };
  const headerList: [string, string][] = [];
  req.forEach((k, v) => headerList.push([k, v]));
  const decision = decideBridge({ method: req.getMethod(), path, query: req.getQuery() ?? "", headers: headerList });

  // An upload still arriving when the answer is written (a refusal here, a 401 or 413
  // before the body was read) is read and discarded, not cut off: a client still
  // writing into a closed connection gets a reset (EPIPE) instead of the answer. Past
  // DRAIN_MAX_BYTES or DRAIN_MAX_MS of discarding, the connection is closed after all.
  const bodyExpected = headerList.some(([k, v]) => (k === "content-length" && v.trim() !== "0") || k === "transfer-encoding");
  const declared = headerList.some(([k]) => k === "transfer-encoding") ? undefined : headerList.find(([k]) => k === "content-length")?.[1].trim();
  state.bodyDone = !bodyExpected;
  let sink: ReadableStreamDefaultController<Uint8Array> | undefined;
  let reading = true;
  let received = 0;
  let lastChunkAt = Date.now();
  const bodyCutShort = (how: string) =>
    `${how} before the request body was complete: ${declared === undefined ? `${received} bytes of its chunked body` : `${received} of the ${declared} bytes its Content-Length declares`} arrived`;
  const failBody = (message: string, status = 400, code = "invalid_request") => {
    state.bodyDone = true;
    if (!sink || !reading) return;
    reading = false;
    try {
      sink.error(new AppError("validation", code, message, { status }));
    } catch {
      // the stream is already closed or errored
    }
  };
  if (bodyExpected) {
    let discarded = 0;
    res.onData((chunk, isLast) => {
      received += chunk.byteLength;
      lastChunkAt = Date.now();
      if (isLast) state.bodyDone = true;
      if (!sink || !reading || state.ended) {
        discarded += chunk.byteLength;
        if (!isLast && state.ended && discarded > DRAIN_MAX_BYTES) closeQuietly(res, state);
        return;
      }
      // A throw here would end the process: enqueue fails once the reader is gone.
      try {
        if (chunk.byteLength > 0) sink.enqueue(new Uint8Array(chunk.slice(0)));
        if (isLast) sink.close();
      } catch {
        reading = false;
      }
    });
  }

  if (decision.kind === "refuse") {
    answerError(res, state, decision.status, bridgeErrorBody(path, decision.status, decision.code, decision.message), decision.headers);
    return;
  }
  let request: Request;
  try {
    const headers = new Headers();
    for (const [k, v] of headerList) headers.append(k, v);
    const body =
      bodyExpected && decision.method !== "GET" && decision.method !== "HEAD"
        ? new ReadableStream<Uint8Array>({ start: (stream) => void (sink = stream), cancel: () => void (reading = false) })
        : undefined;
    request = new Request(decision.url, { method: decision.method, headers, body, signal: controller.signal, duplex: "half" } as RequestInit);
  } catch {
    answerError(res, state, 400, bridgeErrorBody(path, 400, "invalid_request", "the request could not be read (invalid header name or value)"));
    return;
  }

  // A body that stops arriving (a Content-Length larger than what the client sends, a
  // client that hangs) is answered 408 while the client still reads, and the connection
  // closed (what follows could not be framed): uWS itself drops a connection silent for
  // its 10 s idle timeout (8-12 s, in 4 s ticks) without a word.
  if (bodyExpected) {
    const watchStall = () => {
      if (state.bodyDone || state.aborted || state.ended) return;
      const quietMs = Date.now() - lastChunkAt;
      if (quietMs < BODY_STALL_MS) return void setTimeout(watchStall, BODY_STALL_MS - quietMs).unref();
      const message = `${bodyCutShort(`no byte for ${BODY_STALL_MS / 1000} s`)}; send the whole body, with a Content-Length that counts its bytes`;
      failBody(message, 408, "request_timeout");
      answerError(res, state, 408, bridgeErrorBody(path, 408, "request_timeout", message), {}, true);
    };
    setTimeout(watchStall, BODY_STALL_MS).unref();
  }

  Promise.resolve()
    .then(() => fetch(request, env))
    .then((response) => writeResponse(res, response, decision.method === "HEAD", state))
    .catch((err) => {
      onError?.(err);
      answerError(res, state, 500, bridgeErrorBody(path, 500, "internal_error", "internal error"));
    });
}

/** A request body with no byte for this long is answered 408 (below uWS's own 8-12 s silent close). */
export const BODY_STALL_MS = 5_000;

/** How much of an unwanted upload is read and discarded before the connection is closed. */
const DRAIN_MAX_BYTES = 32 * 1024 * 1024;
const DRAIN_MAX_MS = 10_000;

function closeQuietly(res: HttpResponse, state: ResponseState): void {
  state.aborted = true;
  try {
    res.close();
  } catch {
    // already gone
  }
}

interface ResponseState {
  aborted: boolean;
  ended: boolean;
  /** The request body has arrived whole (or there was none). */
  bodyDone: boolean;
}

/** Runs uWS writes unless the response is gone; reports whether they ran. */
function whileOpen(res: HttpResponse, state: ResponseState, write: () => void): boolean {
  if (state.aborted || state.ended) return false;
  try {
    res.cork(write);
    return true;
  } catch {
    // uWS throws on a response it has already discarded: nothing left to write to.
    state.aborted = true;
    return false;
  }
}

function answerError(res: HttpResponse, state: ResponseState, status: number, body: string, headers: Record<string, string> = {}, closeConnection = false): void {
  whileOpen(res, state, () => {
    res.writeStatus(statusLine(status));
    res.writeHeader("content-type", "application/json");
    for (const [k, v] of Object.entries(headers)) res.writeHeader(k, v);
    state.ended = true;
    res.end(body, closeConnection);
  });
  if (!closeConnection) drainBounded(res, state);
}

/** After an answer given before the upload ended: stop draining it after DRAIN_MAX_MS. */
function drainBounded(res: HttpResponse, state: ResponseState): void {
  if (!state.bodyDone) setTimeout(() => !state.bodyDone && closeQuietly(res, state), DRAIN_MAX_MS).unref();
}

async function writeResponse(res: HttpResponse, response: Response, head: boolean, state: ResponseState): Promise<void> {
  const gone = () => state.aborted || state.ended;
  if (gone()) return void response.body?.cancel().catch(() => undefined);
  const closeAfter = response.headers.get("connection")?.toLowerCase() === "close";
  drainBounded(res, state);
  const writeHead = () => {
    res.writeStatus(response.statusText ? `${response.status} ${response.statusText}` : statusLine(response.status));
    response.headers.forEach((value, name) => {
      if (name === "content-length" || name === "transfer-encoding" || name === "set-cookie" || name === "connection") return;
      res.writeHeader(name, value);
    });
    for (const cookie of response.headers.getSetCookie()) res.writeHeader("set-cookie", cookie);
  };
  if (!response.body || head) {
    whileOpen(res, state, () => {
      writeHead();
      state.ended = true;
      res.end(undefined, closeAfter);
    });
    return;
  }
  const reader = response.body.getReader();
  const buffered: Uint8Array[] = [];
  let size = 0;
  let done = false;
  while (size < SINGLE_WRITE_BYTES) {
    const next = await reader.read();
    if (next.done) {
      done = true;
      break;
    }
    buffered.push(next.value);
    size += next.value.byteLength;
  }
  if (gone()) return void reader.cancel().catch(() => undefined);
  if (done) {
    whileOpen(res, state, () => {
      writeHead();
      state.ended = true;
      res.end(concatBytes(buffered, size), closeAfter);
    });
    return;
  }
  // Large or endless body: chunked transfer, waiting for drain when uWS buffers.
  let ok = true;
  whileOpen(res, state, () => {
    writeHead();
    ok = res.write(concatBytes(buffered, size));
  });
  while (true) {
    if (!ok && !gone()) await new Promise<void>((resolve) => res.onWritable(() => (resolve(), true)));
    if (gone()) return void reader.cancel().catch(() => undefined);
    const next = await reader.read();
    if (gone()) return void reader.cancel().catch(() => undefined);
    if (next.done) break;
    whileOpen(res, state, () => {
      ok = res.write(next.value);
    });
  }
  whileOpen(res, state, () => {
    state.ended = true;
    res.end(undefined, closeAfter);
  });
}
