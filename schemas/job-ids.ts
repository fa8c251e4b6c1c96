import { createHash } from "node:crypto";

/**
 * How a batch job's id (`workflow_id`) follows from what the client sent. Part of the
 * wire contract: the id names the job's NATS subject and its artifact folder, and a
 * resubmission must land on the same id to be idempotent.
 *
 * A `request_id` is scoped to its owner (tenant): the id is derived from
 * (owner_id, request_id), so two tenants using one request_id get two jobs and never
 * learn of each other, while one tenant resubmitting it gets the same job back.
 */

/** A name-based UUID: SHA-256 of `name`, in the RFC 9562 version-8 layout. */
function nameBasedUuid(name: string): string {
  const h = createHash("sha256").update(name).digest();
  h[6] = (h[6]! & 0x0f) | 0x80;
  h[8] = (h[8]! & 0x3f) | 0x80;
  const x = h.subarray(0, 16).toString("hex");
  return `${x.slice(0, 8)}-${x.slice(8, 12)}-${x.slice(12, 16)}-${x.slice(16, 20)}-${x.slice(20, 32)}`;
}

/**
 * The job id of `requestId` for `ownerId`. Neither may contain NUL (both have
 * restricted alphabets), so the name is unambiguous; the `v2` tag keeps it disjoint
 * from the legacy ids below.
 */
export function workflowIdFor(ownerId: string, requestId: string): string {
  return nameBasedUuid(`stt-batch-job/v2\u0000${ownerId}\u0000${requestId}`);
}

/**
 * The id jobs got before request_ids were scoped per owner (from the request_id
 * alone). Still recognised so that those jobs keep their artifacts and a resubmission
 * by their owner resumes them; JOBS keeps events 30 days, after which no job of this
 * form remains and this can go.
 */
export function legacyWorkflowIdFor(requestId: string): string {
  return nameBasedUuid(`stt-batch-job\u0000${requestId}`);
}
