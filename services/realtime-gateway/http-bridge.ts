import type { HttpRequest, HttpResponse } from "@trufflesuite/uws-js-unofficial";

export type FetchHandler = (request: Request) => Response | Promise<Response>;

/** Responses up to this size are sent in one write with a Content-Length. */
const SINGLE_WRITE_BYTES = 256 * 1024;

/**
 * The one-port bridge: a plain HTTP request arriving on the uWS listener becomes a
 * WHATWG Request for the hono app's `fetch`, and its Response is written back. The
 * request body streams in (uWS hands chunks that must be copied), the response body
 * streams out honouring uWS backpressure, and a client abort cancels both.
 */
export function bridgeToFetch(fetch: FetchHandler, res: HttpResponse, req: HttpRequest): void {
  const controller = new AbortController();
  let aborted = false;
  res.onAborted(() => {
    aborted = true;
    controller.abort();
  });

  // HttpRequest is only valid synchronously: read everything now.
  const method = req.getMethod().toUpperCase();
  const query = req.getQuery();
  const headers = new Headers();
  req.forEach((k, v) => headers.append(k, v));
  const url = `http://${headers.get("host") || "localhost"}${req.getUrl()}${query ? `?${query}` : ""}`;

  let body: ReadableStream<Uint8Array> | undefined;
  if (method !== "GET" && method !== "HEAD") {
    body = new ReadableStream<Uint8Array>({
      start(stream) {
        res.onData((chunk, isLast) => {
          if (chunk.byteLength > 0) stream.enqueue(new Uint8Array(chunk.slice(0)));
          if (isLast) stream.close();
        });
      },
      cancel() {
        if (!aborted) res.close();
      },
    });
  }

  const request = new Request(url, { method, headers, body, signal: controller.signal, duplex: "half" } as RequestInit);
  Promise.resolve()
    .then(() => fetch(request))
    .then((response) => writeResponse(res, response, method === "HEAD", () => aborted))
    .catch(() => {
      if (!aborted) res.cork(() => res.writeStatus("500 Internal Server Error").end('{"error":{"message":"internal error","type":"server_error","code":"internal_error"}}'));
    });
}

async function writeResponse(res: HttpResponse, response: Response, head: boolean, isAborted: () => boolean): Promise<void> {
  if (isAborted()) return void response.body?.cancel().catch(() => undefined);
  const writeHead = () => {
    res.writeStatus(`${response.status} ${response.statusText || "OK"}`);
    response.headers.forEach((value, name) => {
      if (name === "content-length" || name === "transfer-encoding" || name === "set-cookie") return;
      res.writeHeader(name, value);
    });
    for (const cookie of response.headers.getSetCookie()) res.writeHeader("set-cookie", cookie);
  };
  if (!response.body || head) {
    res.cork(() => {
      writeHead();
      res.end();
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
  if (isAborted()) return void reader.cancel().catch(() => undefined);
  if (done) {
    res.cork(() => {
      writeHead();
      res.end(concat(buffered, size));
    });
    return;
  }
  // Large or endless body: chunked transfer, waiting for drain when uWS buffers.
  let ok = true;
  res.cork(() => {
    writeHead();
    ok = res.write(concat(buffered, size));
  });
  while (true) {
    if (!ok) await new Promise<void>((resolve) => res.onWritable(() => (resolve(), true)));
    if (isAborted()) return void reader.cancel().catch(() => undefined);
    const next = await reader.read();
    if (isAborted()) return void reader.cancel().catch(() => undefined);
    if (next.done) break;
    res.cork(() => {
      ok = res.write(next.value);
    });
  }
  res.cork(() => res.end());
}

function concat(chunks: Uint8Array[], size: number): Uint8Array {
  if (chunks.length === 1) return chunks[0]!;
  const out = new Uint8Array(size);
  let off = 0;
  for (const c of chunks) {
    out.set(c, off);
    off += c.byteLength;
  }
  return out;
}
