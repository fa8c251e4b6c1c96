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
export function parseHttpUrl(raw: string): URL {
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

function mapError(err: unknown, signal: AbortSignal, timeoutMs: number, url: string): AppError {
  if (err instanceof AppError) return err;
  if (signal.aborted) {
    const reason = signal.reason as { name?: string } | undefined;
    if (reason?.name === "TimeoutError") return fail("fetch_timeout", `fetching ${redactUrl(url)} did not finish within ${timeoutMs} ms`, true, err);
    return fail("fetch_aborted", "the request was aborted", true, err);
  }
  const e = err as NodeJS.ErrnoException;
  if (e?.code === "ENOTFOUND" || e?.code === "EAI_AGAIN") {
    return fail("fetch_failed", `could not resolve ${redactUrl(url)}`, e.code === "EAI_AGAIN", err);
  }
  return fail("fetch_failed", `could not reach ${redactUrl(url)} (${e?.code ?? e?.message ?? "error"})`, true, err);
}

function statusError(status: number, url: string): AppError {
  if (status === 404 || status === 410) return fail("audio_not_found", `${redactUrl(url)} answered ${status}`, false);
  const retryable = status >= 500 || status === 429 || status === 408;
  return fail("fetch_http_error", `${redactUrl(url)} answered ${status}`, retryable);
}

/**
 * Opens a guarded request and follows redirects; the caller consumes `body`.
 * Non-2xx final statuses are returned, not thrown.
 */
async function openGuarded(raw: string, options: SafeFetchOptions, signal: AbortSignal): Promise<{ res: IncomingMessage; url: string }> {
  let url = parseHttpUrl(raw);
  const maxRedirects = options.maxRedirects ?? 5;
  for (let hop = 0; ; hop++) {
    const res = await sendOnce(url, options, signal);
    const location = res.headers.location;
    if (res.statusCode && res.statusCode >= 300 && res.statusCode < 400 && location) {
      res.resume();
      if (hop >= maxRedirects) throw fail("too_many_redirects", `more than ${maxRedirects} redirects`, false);
      url = parseHttpUrl(new URL(location, url).toString());
      // A redirect turns POST into GET only for 301-303; webhooks never follow into a GET.
      if (options.method === "POST") throw fail("fetch_http_error", `webhook target redirected (${res.statusCode})`, false);
      continue;
    }
    return { res, url: url.toString() };
  }
}

function deadline(options: SafeFetchOptions): AbortSignal {
  if (!options.signal) return AbortSignal.timeout(options.timeoutMs);
  // Not AbortSignal.any([AbortSignal.timeout(…), signal]): the composite holds its sources
  // weakly, so on Node 20 the timeout signal can be garbage-collected and never fire. A
  // plain timer keeps the deadline alive; its reason is the same TimeoutError.
  const parent = options.signal;
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(new DOMException("The operation was aborted due to timeout", "TimeoutError")), options.timeoutMs);
  timer.unref();
  if (parent.aborted) controller.abort(parent.reason);
  else parent.addEventListener("abort", () => (clearTimeout(timer), controller.abort(parent.reason)), { once: true });
  return controller.signal;
}

/**
 * Streams a URL's body into `destPath`, enforcing the byte and time limits.
 * Throws `audio_not_found` (404/410), `fetch_http_error`, `url_not_allowed`,
 * `fetch_timeout`, `fetch_failed` or `audio_too_large`; removes a partial file.
 */
export async function safeDownload(raw: string, destPath: string, options: SafeFetchOptions): Promise<SafeResponse & { bytes: number }> {
  const signal = deadline(options);
  try {
    const { res, url } = await openGuarded(raw, options, signal);
    const status = res.statusCode ?? 0;
    if (status < 200 || status >= 300) {
      res.resume();
      throw statusError(status, url);
    }
    const declared = Number(res.headers["content-length"] ?? NaN);
    if (Number.isFinite(declared) && declared > options.maxBytes) {
      res.destroy();
      throw fail("audio_too_large", `the audio is ${declared} bytes; the limit is ${options.maxBytes}`, false);
    }
    const bytes = await new Promise<number>((resolve, reject) => {
      const out = createWriteStream(destPath);
      let count = 0;
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
    throw mapError(err, signal, options.timeoutMs, raw);
  }
}

/**
 * One guarded request whose (small) response body is read into memory, up to
 * `maxBytes`. Used for webhooks. Non-2xx statuses are returned, not thrown.
 */
export async function safeRequest(raw: string, options: SafeFetchOptions): Promise<SafeResponse & { body: Buffer }> {
  const signal = deadline(options);
  try {
    const { res, url } = await openGuarded(raw, options, signal);
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
    throw mapError(err, signal, options.timeoutMs, raw);
  }
}
