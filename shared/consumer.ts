import type { JetStreamClient, JsMsg } from "@nats-io/jetstream";
import { toAppError } from "./errors";
import type { Logger } from "./logger";
import { withSpanFromHeaders } from "./telemetry";

/**
 * The one wrapper that maps handler outcomes to JetStream acknowledgements.
 *
 * Handlers are thin: parse, load, decide or act, publish, then return an Outcome.
 * Thrown errors are mapped once: a retryable AppError (or anything unknown) is
 * nak'ed with backoff, a permanent one is terminated. Delivery is at-least-once:
 * handlers must be idempotent (deterministic msgIDs, "already done?" checks).
 *
 * `term()` is sent without a reason: nats-server 2.9 does not parse `+TERM <reason>`
 * and would leave the message pending; the reason goes to the log instead.
 */
export type Outcome =
  | { kind: "ack" }
  | { kind: "retry"; delayMs: number; reason?: string }
  | { kind: "terminate"; reason: string };

export const ack = (): Outcome => ({ kind: "ack" });
export const retry = (delayMs: number, reason?: string): Outcome => ({ kind: "retry", delayMs, reason });
export const terminate = (reason: string): Outcome => ({ kind: "terminate", reason });

export interface ConsumerRunOptions {
  stream: string;
  durable: string;
  /** Messages handled at once by this process. */
  concurrency: number;
  /** Interval of `working()` heartbeats while a handler runs; below the consumer's ack_wait. */
  workingEveryMs?: number;
  logger: Logger;
  /** Backoff for thrown retryable errors: attempt (1-based) → delay. */
  backoffMs?: (attempt: number) => number;
}

export interface RunningConsumer {
  stop(): Promise<void>;
  /** Resolves when the in-flight handlers finish. */
  readonly done: Promise<void>;
}

const defaultBackoff = (attempt: number) => Math.min(30_000, 250 * 2 ** Math.min(attempt - 1, 7));

/**
 * Pulls from a durable consumer and runs `handler` on each message with at most
 * `concurrency` in flight, heartbeating long work with `working()`.
 */
export async function runConsumer(
  js: JetStreamClient,
  options: ConsumerRunOptions,
  handler: (msg: JsMsg) => Promise<Outcome>,
): Promise<RunningConsumer> {
  const consumer = await js.consumers.get(options.stream, options.durable);
  const backoff = options.backoffMs ?? defaultBackoff;
  const workingEvery = options.workingEveryMs ?? 10_000;
  const inFlight = new Set<Promise<void>>();
  let stopped = false;
  const messages = await consumer.consume({ max_messages: Math.max(1, options.concurrency) });

  const handle = async (msg: JsMsg) => {
    const heartbeat = setInterval(() => msg.working(), workingEvery);
    try {
      const outcome = await withSpanFromHeaders(`${options.durable} ${msg.subject}`, msg.headers, () => handler(msg));
      settle(msg, outcome);
    } catch (err) {
      const e = toAppError(err);
      if (e.retryable || e.kind === "internal") {
        const attempt = msg.info.deliveryCount;
        options.logger.warn("handler failed, will retry", { durable: options.durable, subject: msg.subject, attempt, code: e.code, error: e.message });
        msg.nak(backoff(attempt));
      } else {
        options.logger.error("handler failed permanently", { durable: options.durable, subject: msg.subject, code: e.code, error: e.message });
        msg.term();
      }
    } finally {
      clearInterval(heartbeat);
    }
  };

  const settle = (msg: JsMsg, outcome: Outcome) => {
    switch (outcome.kind) {
      case "ack":
        msg.ack();
        return;
      case "retry":
        msg.nak(outcome.delayMs);
        return;
      case "terminate":
        options.logger.warn("message terminated", { durable: options.durable, subject: msg.subject, reason: outcome.reason });
        msg.term();
        return;
      default: {
        const never: never = outcome;
        throw new Error(`unknown outcome ${JSON.stringify(never)}`);
      }
    }
  };

  const done = (async () => {
    for await (const msg of messages) {
      if (stopped) {
        msg.nak();
        continue;
      }
      // consume() never buffers more than max_messages, but be explicit about the bound.
      while (inFlight.size >= options.concurrency) await Promise.race(inFlight);
      const p = handle(msg).finally(() => inFlight.delete(p));
      inFlight.add(p);
    }
    await Promise.all(inFlight);
  })();

  return {
    done,
    stop: async () => {
      stopped = true;
      await messages.close();
      await done.catch(() => undefined);
    },
  };
}
