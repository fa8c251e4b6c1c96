import { AppError } from "../../shared/errors";
import { safeRequest } from "../../shared/net/safe-fetch";
import { SIGNATURE_HEADER, signPayload } from "./signature";

/**
 * One webhook delivery attempt: a signed JSON POST through the SSRF guard (the
 * receiver URL is user-supplied). 2xx is success; anything else, a timeout or a
 * refused connection throws `webhook_failed` (retryable unless the URL itself is not
 * allowed). Redirects are not followed for webhooks.
 */
export interface DeliveryOptions {
  url: string;
  body: string;
  /** Stable per job, so receivers can deduplicate redeliveries. */
  deliveryId: string;
  attempt: number;
  secret?: string;
  allowPrivate: boolean;
  timeoutMs: number;
  now: () => Date;
  signal?: AbortSignal;
}

export async function deliverWebhook(options: DeliveryOptions): Promise<{ status: number }> {
  const headers: Record<string, string> = {
    "content-type": "application/json",
    "x-stt-event": "transcription.job.completed",
    "x-stt-delivery": options.deliveryId,
    "x-stt-attempt": String(options.attempt),
  };
  if (options.secret) headers[SIGNATURE_HEADER] = signPayload(options.secret, options.body, Math.floor(options.now().getTime() / 1000));
  let res;
  try {
    res = await safeRequest(options.url, {
      method: "POST",
      body: options.body,
      headers,
      allowPrivate: options.allowPrivate,
      timeoutMs: options.timeoutMs,
      maxBytes: 64 * 1024,
      maxRedirects: 0,
      signal: options.signal,
    });
  } catch (err) {
    const e = err as AppError;
    if (e?.code === "url_not_allowed" || e?.code === "invalid_url") throw err;
    throw new AppError("upstream", "webhook_failed", `webhook delivery failed: ${e?.message ?? String(err)}`, { cause: err });
  }
  if (res.status < 200 || res.status >= 300) {
    throw new AppError("upstream", "webhook_failed", `webhook receiver answered ${res.status}`);
  }
  return { status: res.status };
}
