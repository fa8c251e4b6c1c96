import { request as httpRequest, type IncomingMessage, type RequestOptions } from "node:http";
import { request as httpsRequest } from "node:https";
import { lookup as dnsLookup, type LookupAddress } from "node:dns";
import { isIP, type LookupFunction } from "node:net";
import { createWriteStream } from "node:fs";
import { unlink } from "node:fs/promises";
import { AppError } from "../errors";
import { isAddressAllowed } from "./address-policy";

/**
 * Outbound HTTP to user-supplied URLs (batch `audio_url`, `webhook_url`), guarded
 * against server-side request forgery.
 *
 * - Only http: and https: URLs.
 * - Every address a host name resolves to is checked (see address-policy.ts) and the
 *   socket connects to the checked address itself (the check runs inside the
 *   socket's `lookup`), so a DNS answer cannot change between check and connect.
 *   A name with any disallowed address is refused outright.
 * - Redirects are followed by hand (at most `maxRedirects`) and each hop is checked
 *   again.
 * - One deadline covers DNS, connect, headers and body; the body is counted while it
 *   streams and the request is aborted at `maxBytes`.
 * - A download may also set a minimum transfer rate: fewer than `minBytesPerSecond` ×
 *   window bytes in any `minRateWindowMs` window (headers included: a server that
 *   accepts and then says nothing is as slow as one that drips) aborts it with
 *   `fetch_too_slow`, permanent. Without it a 1 byte/s origin holds a fetch slot for the
 *   whole deadline, and again on every retry.
 * - An error names the hop that failed (and the URL that redirected to it), not the
 *   first URL.
 *
 * Errors are AppErrors with stable codes; `retryable` says whether trying again later
 * can help (timeouts, connection failures, 5xx, 429) or not (404, refused target).
 */
export interface SafeFetchOptions {
  /** Allow loopback/private targets (embedded default and tests). Never link-local/metadata. */
  allowPrivate: boolean;
  timeoutMs: number;
  maxBytes: number;
  maxRedirects?: number;
  method?: "GET" | "POST";
  headers?: Record<string, string>;
  body?: string | Buffer;
  signal?: AbortSignal;
  /** safeDownload only: abort when fewer bytes than this per second arrive over a window. */
  minBytesPerSecond?: number;
  /** The window of `minBytesPerSecond` (default 10 s). */
  minRateWindowMs?: number;
}

export interface SafeResponse {
  status: number;
  headers: IncomingMessage["headers"];
  /** URL of the final hop, after redirects. */
  url: string;
}

/** Strips credentials, query and fragment: URLs of user content may carry signed tokens. */
export function redactUrl(raw: string): string {
  try {
    const u = new URL(raw);
    return `${u.protocol}//${u.host}${u.pathname}`;
  } catch {
    return "[invalid url]";
  }
}

const fail = (code: string, message: string, retryable: boolean, cause?: unknown) =>
  new AppError(retryable ? "upstream" : "validation", code, message, { retryable, cause });

/** Parses and checks a URL's scheme; throws `invalid_url`. */
function parseHttpUrl(raw: string): URL {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw fail("invalid_url", "the URL is not valid", false);
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    throw fail("invalid_url", "the URL must start with http:// or https://", false);
  }
  return url;
}

function refused(host: string) {
  return fail("url_not_allowed", `refusing to connect to ${host}: loopback, private, link-local and metadata addresses are not allowed`, false);
}

function guardedLookup(allowPrivate: boolean): LookupFunction {
  return (hostname, options, callback) => {
    dnsLookup(hostname, { all: true, family: options.family as number | undefined }, (err, addresses: LookupAddress[]) => {
      if (err) return callback(err, "", 0);
      if (addresses.length === 0 || addresses.some((a) => !isAddressAllowed(a.address, allowPrivate))) {
        return callback(refused(hostname), "", 0);
      }
      if (options.all) return (callback as unknown as (e: null, a: LookupAddress[]) => void)(null, addresses);
      callback(null, addresses[0]!.address, addresses[0]!.family);
    });
  };
}

function bareHost(url: URL): string {
  return url.hostname.startsWith("[") ? url.hostname.slice(1, -1) : url.hostname;
}

/** Sends one request without following redirects; resolves once headers arrive. */
function sendOnce(url: URL, options: SafeFetchOptions, signal: AbortSignal): Promise<IncomingMessage> {
  const host = bareHost(url);
  if (isIP(host) && !isAddressAllowed(host, options.allowPrivate)) return Promise.reject(refused(host));
  const requestOptions: RequestOptions = {
    method: options.method ?? "GET",
    headers: { "user-agent": "stt-service/1", ...options.headers },
    lookup: guardedLookup(options.allowPrivate),
    signal,
    // Never reuse pooled sockets: each connection must pass the address check.
    agent: false,
  };
  return new Promise((resolve, reject) => {
    const req = (url.protocol === "https:" ? httpsRequest : httpRequest)(url, requestOptions, resolve);
    req.on("error", reject);
    if (options.body !== undefined) req.write(options.body);
    req.end();
  });
}

/** Where a request is: the hop being fetched and the one that redirected to it. */
interface Hop {
  url: string;
  from?: string;
}

/** The hop's redacted URL, and where it was redirected from. */
const named = (hop: Hop) => `${redactUrl(hop.url)}${hop.from ? ` (redirected from ${redactUrl(hop.from)})` : ""}`;

/** The abort reason of a transfer below its minimum rate; the message is the job's error. */
class TooSlow extends Error {
  override name = "TooSlowError";
}

function mapError(err: unknown, signal: AbortSignal, timeoutMs: number, hop: Hop): AppError {
  if (err instanceof AppError) return err;
  if (signal.aborted) {
    const reason = signal.reason as { name?: string } | undefined;
    if (reason?.name === "TimeoutError") return fail("fetch_timeout", `fetching ${named(hop)} did not finish within ${timeoutMs} ms`, true, err);
    if (reason instanceof TooSlow) return fail("fetch_too_slow", `${named(hop)} ${reason.message}`, false, err);
    return fail("fetch_aborted", "the request was aborted", true, err);
  }
  const e = err as NodeJS.ErrnoException;
  if (e?.code === "ENOTFOUND" || e?.code === "EAI_AGAIN") {
    return fail("fetch_failed", `could not resolve ${named(hop)}`, e.code === "EAI_AGAIN", err);
  }
  return fail("fetch_failed", `could not reach ${named(hop)} (${e?.code ?? e?.message ?? "error"})`, true, err);
}

function statusError(status: number, hop: Hop): AppError {
  if (status === 404 || status === 410) return fail("audio_not_found", `${named(hop)} answered ${status}`, false);
  const retryable = status >= 500 || status === 429 || status === 408;
  return fail("fetch_http_error", `${named(hop)} answered ${status}`, retryable);
}

/**
 * Opens a guarded request and follows redirects; the caller consumes `body`.
 * Non-2xx final statuses are returned, not thrown.
 */
async function openGuarded(hop: Hop, options: SafeFetchOptions, signal: AbortSignal): Promise<{ res: IncomingMessage; url: string }> {
  let url = parseHttpUrl(hop.url);
  const maxRedirects = options.maxRedirects ?? 5;
  for (let n = 0; ; n++) {
    const res = await sendOnce(url, options, signal);
    const location = res.headers.location;
    if (res.statusCode && res.statusCode >= 300 && res.statusCode < 400 && location) {
      res.resume();
      const next = new URL(location, url).toString();
      if (n >= maxRedirects) throw fail("too_many_redirects", `more than ${maxRedirects} redirects (the last from ${redactUrl(url.toString())} to ${redactUrl(next)})`, false);
      hop.from = url.toString();
      hop.url = next;
      url = parseHttpUrl(next);
      // A redirect turns POST into GET only for 301-303; webhooks never follow into a GET.
      if (options.method === "POST") throw fail("fetch_http_error", `webhook target redirected (${res.statusCode})`, false);
      continue;
    }
    return { res, url: url.toString() };
  }
}

interface Deadline {
  signal: AbortSignal;
  abort(reason: unknown): void;
  /** Stops the timers (the request is over). */
  done(): void;
}

function deadline(options: SafeFetchOptions): Deadline {
  // Not AbortSignal.any([AbortSignal.timeout(…), signal]): the composite holds its sources
  // weakly, so on Node 20 the timeout signal can be garbage-collected and never fire. A
  // plain timer keeps the deadline alive; its reason is the same TimeoutError.
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(new DOMException("The operation was aborted due to timeout", "TimeoutError")), options.timeoutMs);
  timer.unref();
  const parent = options.signal;
  const onParent = () => (clearTimeout(timer), controller.abort(parent!.reason));
  if (parent?.aborted) onParent();
  else parent?.addEventListener("abort", onParent, { once: true });
  return {
    signal: controller.signal,
    abort: (reason) => controller.abort(reason),
    done: () => {
      clearTimeout(timer);
      parent?.removeEventListener("abort", onParent);
    },
  };
}

/**
 * Aborts the transfer when fewer than `minBytesPerSecond` × window bytes arrived in the
 * last window; `received()` counts body bytes so far. Returns the stop function.
 */
function watchRate(options: SafeFetchOptions, received: () => number, abort: (reason: unknown) => void): () => void {
  const rate = options.minBytesPerSecond ?? 0;
  if (rate <= 0) return () => undefined;
  const windowMs = options.minRateWindowMs ?? 10_000;
  const least = Math.ceil((rate * windowMs) / 1000);
  let before = 0;
  const timer = setInterval(() => {
    const now = received();
    if (now - before < least) {
      abort(new TooSlow(`sent ${now - before} bytes in ${windowMs / 1000} s; the least accepted is ${rate} bytes/s`));
    }
    before = now;
  }, windowMs);
  timer.unref();
  return () => clearInterval(timer);
}

/**
 * Streams a URL's body into `destPath`, enforcing the byte and time limits.
 * Throws `audio_not_found` (404/410), `fetch_http_error`, `url_not_allowed`,
 * `fetch_timeout`, `fetch_too_slow`, `fetch_failed` or `audio_too_large`; removes a partial file.
 */
export async function safeDownload(raw: string, destPath: string, options: SafeFetchOptions): Promise<SafeResponse & { bytes: number }> {
  const limit = deadline(options);
  const signal = limit.signal;
  const hop: Hop = { url: raw };
  let count = 0;
  const stopRate = watchRate(options, () => count, limit.abort);
  try {
    const { res, url } = await openGuarded(hop, options, signal);
    const status = res.statusCode ?? 0;
    if (status < 200 || status >= 300) {
      res.resume();
      throw statusError(status, hop);
    }
    const declared = Number(res.headers["content-length"] ?? NaN);
    if (Number.isFinite(declared) && declared > options.maxBytes) {
      res.destroy();
      throw fail("audio_too_large", `the audio is ${declared} bytes; the limit is ${options.maxBytes}`, false);
    }
    const bytes = await new Promise<number>((resolve, reject) => {
      const out = createWriteStream(destPath);
      res.on("data", (chunk: Buffer) => {
        count += chunk.length;
        if (count > options.maxBytes) {
          reject(fail("audio_too_large", `the audio exceeds the limit of ${options.maxBytes} bytes`, false));
          res.destroy();
          out.destroy();
          return;
        }
        if (!out.write(chunk)) {
          res.pause();
          out.once("drain", () => res.resume());
        }
      });
      res.on("end", () => out.end(() => resolve(count)));
      res.on("error", reject);
      res.on("aborted", () => reject(new Error("connection closed mid-body")));
      out.on("error", reject);
    });
    return { status, headers: res.headers, url, bytes };
  } catch (err) {
    await unlink(destPath).catch(() => undefined);
    throw mapError(err, signal, options.timeoutMs, hop);
  } finally {
    stopRate();
    limit.done();
  }
}

/**
 * One guarded request whose (small) response body is read into memory, up to
 * `maxBytes`. Used for webhooks. Non-2xx statuses are returned, not thrown.
 */
export async function safeRequest(raw: string, options: SafeFetchOptions): Promise<SafeResponse & { body: Buffer }> {
  const limit = deadline(options);
  const signal = limit.signal;
  const hop: Hop = { url: raw };
  try {
    const { res, url } = await openGuarded(hop, options, signal);
    const chunks: Buffer[] = [];
    let count = 0;
    for await (const chunk of res) {
      count += (chunk as Buffer).length;
      if (count > options.maxBytes) {
        res.destroy();
        break;
      }
      chunks.push(chunk as Buffer);
    }
    return { status: res.statusCode ?? 0, headers: res.headers, url, body: Buffer.concat(chunks) };
  } catch (err) {
    throw mapError(err, signal, options.timeoutMs, hop);
  } finally {
    limit.done();
  }
}
