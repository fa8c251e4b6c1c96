import pino from "pino";
import { context, isSpanContextValid, trace } from "@opentelemetry/api";

/**
 * The structured logger: pino, one JSON line per record on stderr, written
 * synchronously (a fatal error's last line is not lost to a buffer when the process
 * exits). Records read `{"t":…,"level":"info","msg":…,…fields}`.
 *
 * Callers pass fields, never secrets (keys, tokens, Authorization headers). Two lines
 * of defence anyway: pino's path redaction for secret-named fields at the top level
 * and one level down (`req.headers.authorization`), and `redact` below, which also
 * masks `sk-…` / `rt_…` / `ek_…` / `whsec_…` values inside any string field.
 *
 * A record written inside a traced span carries its `trace_id` and `span_id`
 * (shared/telemetry.ts), so a log line leads to its trace and back.
 */
export type LogLevel = "debug" | "info" | "warn" | "error";

export interface Logger {
  debug(msg: string, fields?: Record<string, unknown>): void;
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  error(msg: string, fields?: Record<string, unknown>): void;
  child(fields: Record<string, unknown>): Logger;
}

const secretField = /(authorization|token|secret|password|api_?key|^key$|signature|cookie)/i;
const secretValue = /\b(sk-|rt_|ek_|whsec_)[A-Za-z0-9._-]{6,}/g;
const SECRET_NAMES = ["authorization", "token", "secret", "password", "apiKey", "api_key", "key", "signature", "cookie", "adminToken", "sessionToken", "access_token"];

/** Masks secret-named fields and key/token-shaped values (nested objects included). */
function redact(fields: Record<string, unknown>, depth = 0): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(fields)) out[k] = secretField.test(k) ? "[redacted]" : redactValue(v, depth);
  return out;
}

function redactValue(v: unknown, depth: number): unknown {
  if (typeof v === "string") return v.replace(secretValue, "$1[redacted]");
  if (v instanceof Error) return { name: v.name, message: v.message.replace(secretValue, "$1[redacted]") };
  if (depth < 4 && Array.isArray(v)) return v.map((x) => redactValue(x, depth + 1));
  if (depth < 4 && v && typeof v === "object") return redact(v as Record<string, unknown>, depth + 1);
  return v;
}

const destination = pino.destination({ dest: 2, sync: true });

/** The active span's ids, for every record written inside one; {} outside a span (or with tracing off). */
export function traceFields(): Record<string, string> {
  const sc = trace.getSpan(context.active())?.spanContext();
  return sc && isSpanContextValid(sc) ? { trace_id: sc.traceId, span_id: sc.spanId } : {};
}

function wrap(p: pino.Logger): Logger {
  const write = (lvl: LogLevel) => (msg: string, fields?: Record<string, unknown>) => {
    if (!p.isLevelEnabled(lvl)) return;
    if (fields) p[lvl](redact(fields), msg);
    else p[lvl](msg);
  };
  return {
    debug: write("debug"),
    info: write("info"),
    warn: write("warn"),
    error: write("error"),
    child: (fields) => wrap(p.child(redact(fields))),
  };
}

export function createLogger(level: LogLevel = "info", base: Record<string, unknown> = {}): Logger {
  const root = pino(
    {
      level,
      base: null,
      messageKey: "msg",
      timestamp: () => `,"t":"${new Date().toISOString()}"`,
      formatters: { level: (label) => ({ level: label }) },
      mixin: traceFields,
      redact: { paths: [...SECRET_NAMES, ...SECRET_NAMES.map((n) => `*.${n}`), 'req.headers["x-api-key"]'], censor: "[redacted]" },
    },
    destination,
  );
  return wrap(Object.keys(base).length ? root.child(redact(base)) : root);
}
