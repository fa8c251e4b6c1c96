import type { ConsumerConfig, ConsumerMessages, JetStreamClient, JsMsg } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
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
 *
 * NATS going away: nats.js resumes a `consume()` by itself after a reconnect when the
 * durable still exists (file-backed streams keep it across a nats-server restart). When
 * the durable or its stream is gone (a wiped store), `consume()` would only report
 * `consumer_not_found` forever; the runner then stops that loop, re-adds the durable
 * with the configuration it had at start, and consumes again, with backoff. The same
 * happens if the message iterator ends for any other reason while not stopped.
 *
 * Every ack, nak and term waits for the server's confirmation and is sent again until
 * it comes (see `send`: an ack through nats.js's `JsMsg.ackAck()`), so a settlement lost
 * to a reconnect or to a cluster's consumer leader election does not leave the message
 * waiting out its ack_wait.
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
  const jsm = await js.jetstreamManager();
  const first = await js.consumers.get(options.stream, options.durable);
  // What to re-add if the durable disappears (the service declared it before us).
  const declared: Partial<ConsumerConfig> = (await first.info(true)).config;
  const backoff = options.backoffMs ?? defaultBackoff;
  const workingEvery = options.workingEveryMs ?? 10_000;
  const inFlight = new Set<Promise<void>>();
  let stopped = false;
  let messages: ConsumerMessages | undefined;

  const settling = new Set<Promise<void>>();
  let unconfirmedWarned = false;
  /**
   * Settles a message and waits for the server to confirm it, sending it again until it
   * does (a repeated ack/nak/term is harmless). A settlement published while NATS is
   * away, while the restarted server is still loading JetStream, or in a cluster while
   * the consumer has no leader (the node leading it died, an election is under way) is
   * dropped without a word, and the message would wait out its ack_wait (30 s or more)
   * before anyone saw it again. Gives up after SETTLE_GIVE_UP_MS: the ack_wait then
   * redelivers, and handlers are idempotent.
   *
   * An ack is first sent as nats.js's confirmed ack, `JsMsg.ackAck()`. nats.js has no
   * confirmed nak or term, and `ackAck()` marks the message settled on its first call (a
   * second sends nothing), so a nak, a term and an ack whose confirmation did not come
   * go through `confirmedSettlement` below.
   */
  const send = (msg: JsMsg, settlement: Settlement) => {
    const p = (async () => {
      const giveUpAt = Date.now() + SETTLE_GIVE_UP_MS;
      let ackAckSent = false;
      for (let delay = 100; ; delay = Math.min(delay * 2, 2000)) {
        try {
          if (settlement.kind === "ack" && !ackAckSent) {
            ackAckSent = true;
            // false: nothing to confirm (settled already, or not a JetStream delivery)
            await msg.ackAck({ timeout: CONFIRM_TIMEOUT_MS });
            return;
          }
          const request = confirmedSettlement(js, msg);
          if (!request) {
            if (!unconfirmedWarned) options.logger.warn("confirmed nak/term not available in this nats.js (its internals differ from the pinned version): settling unconfirmed", { durable: options.durable });
            unconfirmedWarned = true;
            settleUnconfirmed(msg, settlement);
            return;
          }
          await request(settlementPayload(settlement));
          return;
        } catch (err) {
          // A stopping runner does not wait out an outage: the ack wait covers it.
          if (connectionClosed(js) || stopped || Date.now() > giveUpAt) {
            options.logger.warn("settlement not confirmed; the message will be redelivered after its ack wait", { durable: options.durable, subject: msg.subject, settlement: settlement.kind, error: String((err as Error)?.message ?? err) });
            return;
          }
          await sleep(delay);
        }
      }
    })();
    settling.add(p);
    void p.finally(() => settling.delete(p));
    return p;
  };

  const handle = async (msg: JsMsg) => {
    const heartbeat = setInterval(() => msg.working(), workingEvery);
    try {
      const outcome = await withSpanFromHeaders(`${options.durable} ${msg.subject}`, msg.headers, () => handler(msg));
      await settle(msg, outcome);
    } catch (err) {
      const e = toAppError(err);
      if (e.retryable || e.kind === "internal") {
        const attempt = msg.info.deliveryCount;
        options.logger.warn("handler failed, will retry", { durable: options.durable, subject: msg.subject, attempt, code: e.code, error: e.message });
        await send(msg, { kind: "nak", delayMs: backoff(attempt) });
      } else {
        options.logger.error("handler failed permanently", { durable: options.durable, subject: msg.subject, code: e.code, error: e.message });
        await send(msg, { kind: "term" });
      }
    } finally {
      clearInterval(heartbeat);
    }
  };

  const settle = (msg: JsMsg, outcome: Outcome): Promise<void> => {
    switch (outcome.kind) {
      case "ack":
        return send(msg, { kind: "ack" });
      case "retry":
        return send(msg, { kind: "nak", delayMs: outcome.delayMs });
      case "terminate":
        options.logger.warn("message terminated", { durable: options.durable, subject: msg.subject, reason: outcome.reason });
        return send(msg, { kind: "term" });
      default: {
        const never: never = outcome;
        throw new Error(`unknown outcome ${JSON.stringify(never)}`);
      }
    }
  };

  /** One consume() session; returns when its iterator ends. */
  const consumeOnce = async (consumer: typeof first) => {
    // A short pull expiry: its idle heartbeat (half of it) is how a consumer whose leader
    // died (a cluster node lost) notices and pulls again from the new leader, after two
    // missed heartbeats; the default 30 s would stall the consumer that long.
    const current = await consumer.consume({ max_messages: Math.max(1, options.concurrency), expires: PULL_EXPIRES_MS });
    messages = current;
    void watchForMissing(current);
    for await (const msg of current) {
      if (stopped) {
        msg.nak();
        continue;
      }
      // consume() never buffers more than max_messages, but be explicit about the bound.
      while (inFlight.size >= options.concurrency) await Promise.race(inFlight);
      const p = handle(msg).finally(() => inFlight.delete(p));
      inFlight.add(p);
    }
  };

  /** Ends the session when the durable or its stream is reported gone. */
  const watchForMissing = async (current: ConsumerMessages) => {
    for await (const s of current.status()) {
      if (s.type === "consumer_not_found" || s.type === "stream_not_found" || s.type === "consumer_deleted") {
        options.logger.warn("durable consumer missing; re-declaring it", { durable: options.durable, event: s.type });
        current.stop();
        return;
      }
    }
  };

  /** Re-adds the durable when it is missing (idempotent when it exists). */
  const redeclare = async () => {
    try {
      await jsm.consumers.info(options.stream, options.durable);
    } catch (err) {
      if (!isNotFound(err)) throw err;
      await jsm.consumers.add(options.stream, { ...declared, durable_name: options.durable });
    }
  };

  const done = (async () => {
    let consumer = first;
    let delay = 250;
    while (!stopped) {
      try {
        const started = Date.now();
        await consumeOnce(consumer);
        if (Date.now() - started > 30_000) delay = 250;
      } catch (err) {
        if (!stopped) options.logger.warn("consumer interrupted", { durable: options.durable, error: String((err as Error)?.message ?? err) });
      }
      // A closed connection (the process is shutting down) ends the runner too.
      if (stopped || connectionClosed(js)) break;
      await sleep(delay);
      delay = Math.min(delay * 2, 5000);
      try {
        await redeclare();
        consumer = await js.consumers.get(options.stream, options.durable);
      } catch (err) {
        options.logger.warn("consumer not re-declared yet", { durable: options.durable, error: String((err as Error)?.message ?? err) });
      }
    }
    await Promise.all(inFlight);
    await Promise.all(settling);
  })();

  return {
    done,
    stop: async () => {
      stopped = true;
      await messages?.close();
      await done.catch(() => undefined);
    },
  };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const SETTLE_GIVE_UP_MS = 60_000;
/** How long one confirmation is waited for before the settlement is sent again. */
const CONFIRM_TIMEOUT_MS = 2_000;
const PULL_EXPIRES_MS = 8_000;

type Settlement = { kind: "ack" } | { kind: "nak"; delayMs: number } | { kind: "term" };

/** What nats.js's `ack()`, `nak(delay)` and `term()` send. */
function settlementPayload(s: Settlement): string {
  if (s.kind === "ack") return "+ACK";
  if (s.kind === "term") return "+TERM";
  return s.delayMs > 0 ? `-NAK ${JSON.stringify({ delay: s.delayMs * 1_000_000 })}` : "-NAK";
}

function settleUnconfirmed(msg: JsMsg, s: Settlement): void {
  if (s.kind === "ack") msg.ack();
  else if (s.kind === "term") msg.term();
  else msg.nak(s.delayMs);
}

/**
 * A confirmed settlement: a request on the message's ack subject (`$JS.ACK.…`), which the
 * server answers once it has applied it. nats.js 3.4 offers that only for a first ack
 * (`ackAck()`), so the ack subject and the connection are taken from its implementation
 * (`JsMsgImpl.reply`, `JetStreamClientImpl.nc`), the one place this file reaches past
 * nats.js's public API; package.json pins the version and test/event-store.test.ts fails
 * when they are not found. Undefined then, and the runner settles unconfirmed.
 */
export function confirmedSettlement(js: JetStreamClient, msg: JsMsg): ((payload: string) => Promise<void>) | undefined {
  const ackSubject = (msg as JsMsg & { reply?: unknown }).reply;
  const nc = (js as JetStreamClient & { nc?: Partial<NatsConnection> }).nc;
  if (typeof ackSubject !== "string" || !ackSubject.startsWith("$JS.ACK.") || typeof nc?.request !== "function") return undefined;
  const request = nc.request.bind(nc);
  return async (payload) => {
    await request(ackSubject, payload, { timeout: CONFIRM_TIMEOUT_MS });
  };
}

/** Whether the client's connection is closed (the process is stopping). */
function connectionClosed(js: JetStreamClient): boolean {
  return (js as JetStreamClient & { nc?: Partial<NatsConnection> }).nc?.isClosed?.() === true;
}

function isNotFound(err: unknown): boolean {
  return /not found/i.test((err as Error)?.message ?? "");
}
