import type { JsMsg } from "@nats-io/jetstream";
import { ack, retry, runConsumer, terminate, type Outcome } from "../../shared/consumer";
import { toAppError } from "../../shared/errors";
import { ensureConsumer } from "../../shared/nats";
import { getJson } from "../../shared/objects/index";
import { artifactKeys, jobResult, reviewedResult, stepCommand, type WebhookPayload } from "../../schemas/jobs";
import type { RunningService, ServiceContext } from "../context";
import { deliverWebhook } from "./deliver";
import { webhookDeliveries } from "../../shared/metrics";

/**
 * The webhook service: consumes `job.cmd.webhook.>` and POSTs the finished job's full
 * result (raw and reviewed) to its `webhook_url`, signed (see signature.ts).
 *
 * Every attempt is recorded on the job through its store (ctx.jobs, the one writer of
 * `job.evt`): RecordWebhookDelivered on a 2xx, RecordStepAttemptFailed otherwise (final
 * after JOB_WEBHOOK_MAX_ATTEMPTS, with exponential backoff between attempts), so the
 * delivery state shows in the job's steps. The job is read from the store's cached
 * state (only events since the last look are read); it is complete before the first
 * attempt, and a webhook failure never fails it (the decider's rule).
 *
 * At-least-once: a receiver may see a delivery twice (e.g. a crash between its 2xx
 * and our record); `X-STT-Delivery` is stable per job so receivers can deduplicate.
 */
const WEBHOOK_DURABLE = "jobs-webhook";

export async function startWebhooks(ctx: ServiceContext): Promise<RunningService> {
  const { nats, config, objects, jobs } = ctx;
  const logger = ctx.logger.child({ service: "webhooks" });
  const stream = nats.topology.streams.jobs.name;
  const maxAttempts = config.jobs.webhookMaxAttempts;
  await ensureConsumer(nats.jsm, {
    stream,
    durable: WEBHOOK_DURABLE,
    filterSubject: nats.topology.subjects.jobCommands("webhook"),
    ackWaitMs: Math.max(config.jobs.stepAckWaitMs, config.jobs.webhookTimeoutMs * 2),
    maxDeliver: maxAttempts + 5,
    maxAckPending: 1000,
    deliver: "all",
  });
  if (!config.jobs.webhookSigningSecret) logger.warn("WEBHOOK_SIGNING_SECRET is not set: webhook deliveries are unsigned");
  const aborter = new AbortController();

  const handle = async (msg: JsMsg): Promise<Outcome> => {
    const parsed = stepCommand.safeParse((() => { try { return msg.json(); } catch { return undefined; } })());
    if (!parsed.success || parsed.data.step !== "webhook") return terminate("malformed webhook command");
    const { workflowId, attempt } = parsed.data;
    // once per job: read the leader's log (a lagging replica's "no such job" would drop the delivery)
    const { state } = await jobs.load(workflowId, { fromLeader: true });
    if (state.status === "none" || !state.spec.webhookUrl) return terminate("job has no webhook");
    if (state.steps.webhook?.status === "complete") return ack();
    const { spec } = state;
    const delivery = msg.info.deliveryCount;
    const now = () => ctx.now().toISOString();
    try {
      const result = jobResult.parse(await getJson(objects, artifactKeys.result(spec)));
      const reviewed = spec.review ? reviewedResult.parse(await getJson(objects, artifactKeys.reviewed(spec))) : null;
      const payload: WebhookPayload = {
        type: "transcription.job.completed",
        workflow_id: workflowId,
        request_id: spec.requestId,
        status: "complete",
        output: { result, reviewed_result: reviewed },
        metadata: spec.metadata ?? null,
      };
      const { status } = await deliverWebhook({
        url: spec.webhookUrl!,
        body: JSON.stringify(payload),
        deliveryId: workflowId,
        attempt: delivery,
        secret: config.jobs.webhookSigningSecret,
        allowPrivate: config.jobs.allowPrivateUrls,
        timeoutMs: config.jobs.webhookTimeoutMs,
        now: ctx.now,
        signal: aborter.signal,
      });
      await jobs.execute(workflowId, { type: "RecordWebhookDelivered", attempt: delivery, status, now: now() });
      webhookDeliveries.inc({ outcome: "delivered" });
      return ack();
    } catch (err) {
      if (aborter.signal.aborted) return retry(0, "shutting down");
      const e = toAppError(err);
      const final = !e.retryable || delivery >= maxAttempts;
      logger.warn(final ? "webhook delivery abandoned" : "webhook delivery failed, will retry", { workflowId, delivery, code: e.code, error: e.message });
      await jobs.execute(workflowId, {
        type: "RecordStepAttemptFailed",
        step: "webhook",
        attempt,
        delivery,
        error: { code: e.code, message: e.message },
        final,
        now: now(),
      });
      webhookDeliveries.inc({ outcome: final ? (e.retryable ? "gave_up" : "refused") : "retry" });
      return final ? ack() : retry(Math.min(10 * 60_000, config.jobs.webhookBackoffMs * 2 ** (delivery - 1)), e.code);
    }
  };

  const running = await runConsumer(nats.js, { stream, durable: WEBHOOK_DURABLE, concurrency: 8, logger, workingEveryMs: 5000 }, handle);
  return {
    name: "webhooks",
    stop: async () => {
      aborter.abort(new Error("stopping"));
      await running.stop();
    },
  };
}
