import type { SegmentEvent } from "../../schemas/segment";

/**
 * The segment plane's audit trail (stream `segments`, subject `segment.evt.<keyId>`; not
 * projected): one outcome per request, SegmentTranscribed or SegmentFailed, built here
 * from what the route learnt of the request.
 */

/** What the audit knows of one request; the route fills it in as it reads the request. */
export interface SegmentRequest {
  requestId: string;
  keyId: string;
  ownerId: string;
  model: string;
  audioSeconds: number;
  /** Bytes of the uploaded file. */
  bytes: number;
  responseFormat: string;
}

/** Milliseconds to 0.1. */
const round = (x: number) => Math.round(x * 10) / 10;

function common(r: SegmentRequest) {
  return {
    requestId: r.requestId,
    keyId: r.keyId,
    ownerId: r.ownerId,
    model: r.model,
    audioSeconds: Math.round(r.audioSeconds * 1000) / 1000,
    bytes: r.bytes,
    responseFormat: r.responseFormat,
  };
}

export function segmentTranscribed(
  request: SegmentRequest,
  outcome: { workerId: string; fallbackUsed: boolean; workerMs: number; totalMs: number; textChars: number },
): SegmentEvent {
  return {
    type: "SegmentTranscribed",
    data: { ...common(request), workerId: outcome.workerId, fallbackUsed: outcome.fallbackUsed, workerMs: round(outcome.workerMs), totalMs: round(outcome.totalMs), textChars: outcome.textChars },
  };
}

/** A request that failed after authentication; the message is cut to 500 characters. */
export function segmentFailed(request: SegmentRequest, failure: { code: string; message: string; totalMs: number }): SegmentEvent {
  return { type: "SegmentFailed", data: { ...common(request), code: failure.code, message: failure.message.slice(0, 500), totalMs: round(failure.totalMs) } };
}

/**
 * The one id rule of the segment stream, `<requestId>:<event type>`: an append that is
 * retried or repeated within the stream's duplicate window stores the event once. Both
 * types may follow for one request (the answer failed after SegmentTranscribed was
 * stored, say usage could not be recorded), and both are kept.
 */
export const segmentEventId = (event: SegmentEvent): string => `${event.data.requestId}:${event.type}`;
