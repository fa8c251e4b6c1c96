import type { MiddlewareHandler } from "hono";
import { concatBytes } from "../../shared/bytes";
import { AppError } from "../../shared/errors";

/** JSON bodies (job submissions, admin calls, legacy segment JSON): the largest accepted. */
export const MAX_JSON_BODY_BYTES = 256 * 1024;

const requestTooLarge = (limit: number) =>
  new AppError("too_large", "request_too_large", `the request body is larger than the ${limit}-byte limit of this route`);

export interface BodyLimitOptions {
  /** Largest body for the request, or undefined when the route enforces its own limit while streaming. */
  limitFor(request: Request): number | undefined;
}

/**
 * Limits every request body while it streams in: a declared Content-Length over the
 * limit is refused before a byte is read, and a chunked body is counted as it arrives
 * and refused at the first byte past the limit (413 `request_too_large`). What fits is
 * buffered and handed on, so the route reads a body that is known to be bounded.
 */
export function limitBody(options: BodyLimitOptions): MiddlewareHandler {
  return async function limitBodyMiddleware(c, next) {
    const request = c.req.raw;
    if (!request.body) return next();
    const limit = options.limitFor(request);
    if (limit === undefined) return next();
    const declared = request.headers.get("content-length");
    if (declared !== null && !request.headers.has("transfer-encoding")) {
      const n = Number(declared);
      if (!Number.isSafeInteger(n) || n < 0) throw new AppError("validation", "invalid_request", "Content-Length is not a valid length");
      if (n > limit) throw requestTooLarge(limit);
    }
    const body = await readBounded(request.body, limit);
    if (body === undefined) throw requestTooLarge(limit);
    c.req.raw = new Request(request, { body: body as Uint8Array<ArrayBuffer> });
    return next();
  };
}

/** Reads a stream whole, or returns undefined (and cancels it) past `limit` bytes. */
export async function readBounded(stream: ReadableStream<Uint8Array>, limit: number): Promise<Uint8Array | undefined> {
  const reader = stream.getReader();
  const chunks: Uint8Array[] = [];
  let total = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    total += value.byteLength;
    if (total > limit) {
      await reader.cancel().catch(() => undefined);
      return undefined;
    }
    chunks.push(value);
  }
  return concatBytes(chunks, total);
}
