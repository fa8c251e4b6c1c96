import type { JsMsg } from "@nats-io/jetstream";
import { ack, retry, runConsumer, terminate, type Outcome } from "../../shared/consumer";
import { appendEvents, loadEvents } from "../../shared/event-store";
import { toAppError } from "../../shared/errors";
import { ensureConsumer } from "../../shared/nats";
import { getJson } from "../../shared/objects/index";
import { artifactKeys, jobResult, reviewedResult, stepCommand, type WebhookPayload } from "../../schemas/jobs";
import { jobEventEnvelope, type JobEvent } from "../../domain/jobs/events";
import type { RunningService, ServiceContext } from "../context";
import { deliverWebhook } from "./deliver";
import { webhookDeliveries } from "../../shared/metrics";

/**
 * The webhook service: consumes `job.cmd.webhook.>` and POSTs the finished job's full
 * result (raw and reviewed) to its `webhook_url`, signed (see signature.ts).
 *
 * Every attempt is recorded on the job's own subject: WebhookDelivered on a 2xx,
 * StepAttemptFailed otherwise (final after JOB_WEBHOOK_MAX_ATTEMPTS, with exponential
 * backoff between attempts), so the delivery state shows in the job's steps. These
 * are facts appended without an expected sequence: they never change what the job
 * decides, and the job is complete before the first attempt.
 *
 * At-least-once: a receiver may see a delivery twice (e.g. a crash between its 2xx
 * and our record); `X-STT-Delivery` is stable per job so receivers can deduplicate.
 */
export const WEBHOOK_DURABLE = "jobs-webhook";

export async function startWebhooks(ctx: ServiceContext): Promise<RunningService> {
  const { nats, config, objects } = ctx;
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

  const record = (workflowId: string, event: JobEvent, msgId: string) =>
    appendEvents(nats.js, jobEventEnvelope, nats.topology.subjects.jobEvent(workflowId), [{ type: event.type, data: event.data, msgId, metadata: { correlationId: workflowId } }]);

  const handle = async (msg: JsMsg): Promise<Outcome> => {
    const parsed = stepCommand.safeParse((() => { try { return msg.json(); } catch { return undefined; } })());
    if (!parsed.success || parsed.data.step !== "webhook") return terminate("malformed webhook command");
    const { workflowId, attempt } = parsed.data;
    const { events } = await loadEvents(nats.js, nats.jsm, stream, jobEventEnvelope, nats.topology.subjects.jobEvent(workflowId));
    const submitted = events.find((r) => r.event.type === "JobSubmitted")?.event;
    if (!submitted || submitted.type !== "JobSubmitted" || !submitted.data.webhookUrl) return terminate("job has no webhook");
    if (events.some((r) => r.event.type === "WebhookDelivered")) return ack();
    const spec = submitted.data;
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
      await record(workflowId, { type: "WebhookDelivered", data: { attempt: delivery, status, at: now() } }, `${workflowId}:webhook:delivered`);
      webhookDeliveries.inc({ outcome: "delivered" });
      return ack();
    } catch (err) {
      if (aborter.signal.aborted) return retry(0, "shutting down");
      const e = toAppError(err);
      const final = !e.retryable || delivery >= maxAttempts;
      logger.warn(final ? "webhook delivery abandoned" : "webhook delivery failed, will retry", { workflowId, delivery, code: e.code, error: e.message });
      await record(
        workflowId,
        { type: "StepAttemptFailed", data: { step: "webhook", attempt, delivery, error: { code: e.code, message: e.message }, final, at: now() } },
        `${workflowId}:webhook:${attempt}:${delivery}`,
      );
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
