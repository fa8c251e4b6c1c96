import type { UsageCommand, UsageEvent } from "./events";
import { round3 } from "./quota";

/** An event as decided, with the id it is stored under (the JetStream msgID). */
export interface DecidedUsage {
  event: UsageEvent;
  eventId: string;
}

/**
 * The usage id of a record: `<subjectId>:usage`, or `<subjectId>:usage:<part>` for a
 * subject recorded in parts, so a retried or redelivered record counts once (a job's
 * `<workflowId>:usage`, a segment request's `<requestId>:usage`, a session's
 * `<sessionId>:usage:<n>`).
 */
export function usageId(subjectId: string, part?: number): string {
  return part === undefined ? `${subjectId}:usage` : `${subjectId}:usage:${part}`;
}

/**
 * Usage has no state to decide on: every record is a fact of its own, counted once by
 * its usage id. Audio seconds are kept to the millisecond.
 */
export function decideUsage(command: UsageCommand): DecidedUsage[] {
  switch (command.type) {
    case "RecordUsage": {
      const d = command.data;
      return [
        {
          eventId: usageId(d.subjectId, d.part),
          event: {
            type: "UsageRecorded",
            data: {
              keyId: d.keyId,
              ownerId: d.ownerId,
              plane: d.plane,
              audioSeconds: round3(d.audioSeconds),
              requests: d.requests,
              subjectId: d.subjectId,
              occurredAt: d.at,
            },
          },
        },
      ];
    }
    default: {
      const never: never = command.type;
      return never;
    }
  }
}
