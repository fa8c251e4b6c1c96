/**
 * The one error taxonomy of the service. Every failure that crosses a boundary is an
 * AppError with a stable `code`, an HTTP status and a `retryable` flag; it is mapped
 * once to HTTP envelopes (services/http-gateway/errors.ts) and once to JetStream
 * ack/nak/term (shared/consumer.ts).
 */
export type ErrorKind =
  | "validation"
  | "unauthorized"
  | "forbidden"
  | "not_found"
  | "conflict"
  | "too_large"
  | "unsupported"
  | "rate_limited"
  | "unavailable"
  | "upstream"
  | "internal";

const statusByKind: Record<ErrorKind, number> = {
  validation: 400,
  unauthorized: 401,
  forbidden: 403,
  not_found: 404,
  conflict: 409,
  too_large: 413,
  unsupported: 415,
  rate_limited: 429,
  unavailable: 503,
  upstream: 502,
  internal: 500,
};

const retryableByKind: Record<ErrorKind, boolean> = {
  validation: false,
  unauthorized: false,
  forbidden: false,
  not_found: false,
  conflict: true,
  too_large: false,
  unsupported: false,
  rate_limited: true,
  unavailable: true,
  upstream: true,
  internal: false,
};

export interface AppErrorOptions {
  status?: number;
  retryable?: boolean;
  /** Extra HTTP headers for the response (e.g. Retry-After). */
  headers?: Record<string, string>;
  /** OpenAI-style error `type` override (default derived from the status). */
  type?: string;
  /** OpenAI-style `param` naming the offending request field. */
  param?: string;
  cause?: unknown;
}

export class AppError extends Error {
  readonly kind: ErrorKind;
  readonly code: string;
  readonly status: number;
  readonly retryable: boolean;
  readonly headers: Record<string, string>;
  readonly type?: string;
  readonly param?: string;

  constructor(kind: ErrorKind, code: string, message: string, options: AppErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = "AppError";
    this.kind = kind;
    this.code = code;
    this.status = options.status ?? statusByKind[kind];
    this.retryable = options.retryable ?? retryableByKind[kind];
    this.headers = options.headers ?? {};
    this.type = options.type;
    this.param = options.param;
  }
}

export const validationError = (code: string, message: string, options?: AppErrorOptions) =>
  new AppError("validation", code, message, options);
export const unauthorized = (code: string, message: string, options?: AppErrorOptions) =>
  new AppError("unauthorized", code, message, options);
export const notFound = (code: string, message: string, options?: AppErrorOptions) =>
  new AppError("not_found", code, message, options);
export const conflict = (code: string, message: string, options?: AppErrorOptions) =>
  new AppError("conflict", code, message, options);

/**
 * The HTTP headers of an error's answer: its own, and for a 503 without a Retry-After of
 * its own, `Retry-After: 1` (a store or counter that could not be reached this moment),
 * so no 503 leaves a client guessing when to come back.
 */
export function errorHeaders(e: AppError): Record<string, string> {
  if (e.status !== 503 || Object.keys(e.headers).some((h) => h.toLowerCase() === "retry-after")) return e.headers;
  return { ...e.headers, "Retry-After": "1" };
}

export function isAppError(value: unknown): value is AppError {
  return value instanceof AppError;
}

/** Converts anything thrown into an AppError, keeping AppErrors as they are. */
export function toAppError(value: unknown, fallbackCode = "internal_error"): AppError {
  if (value instanceof AppError) return value;
  const message = value instanceof Error ? value.message : String(value);
  return new AppError("internal", fallbackCode, message, { cause: value });
}
