/**
 * Minimal structured logger: one JSON line per record on stderr. Callers pass fields,
 * never secrets (keys, tokens, Authorization headers); `redact` strips the obvious ones
 * anyway as a second line of defence.
 */
export type LogLevel = "debug" | "info" | "warn" | "error";
const order: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40 };

export interface Logger {
  debug(msg: string, fields?: Record<string, unknown>): void;
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  error(msg: string, fields?: Record<string, unknown>): void;
  child(fields: Record<string, unknown>): Logger;
}

const secretField = /(authorization|token|secret|password|api_?key|^key$)/i;
const secretValue = /\b(sk-|rt_)[A-Za-z0-9._-]{6,}/g;

export function redact(fields: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(fields)) {
    if (secretField.test(k)) out[k] = "[redacted]";
    else if (typeof v === "string") out[k] = v.replace(secretValue, "$1[redacted]");
    else if (v instanceof Error) out[k] = { name: v.name, message: v.message.replace(secretValue, "$1[redacted]") };
    else out[k] = v;
  }
  return out;
}

export function createLogger(level: LogLevel = "info", base: Record<string, unknown> = {}): Logger {
  const min = order[level];
  const write = (lvl: LogLevel, msg: string, fields?: Record<string, unknown>) => {
    if (order[lvl] < min) return;
    const record = { t: new Date().toISOString(), level: lvl, msg, ...redact({ ...base, ...fields }) };
    process.stderr.write(JSON.stringify(record) + "\n");
  };
  return {
    debug: (m, f) => write("debug", m, f),
    info: (m, f) => write("info", m, f),
    warn: (m, f) => write("warn", m, f),
    error: (m, f) => write("error", m, f),
    child: (fields) => createLogger(level, { ...base, ...fields }),
  };
}
