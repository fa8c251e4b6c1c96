import type { Transaction } from "kysely";
import type { Database } from "../../shared/db/index";
import type { Topology } from "../../shared/nats";
import type { Projection } from "../../shared/projection";
import { evolve, initialJobState, type JobState } from "./decider";
import { jobEventEnvelope, type JobEvent } from "./events";
import { stepsView } from "./views";

/**
 * Job events → `jobs` rows (the polling read model). The row keeps the folded
 * aggregate (`state`) and the poll view's columns derived from it, using the job's own
 * `evolve`, so the read model can never disagree with the aggregate's rules. Output is
 * not copied here: the poll route reads result.json from object storage.
 */
export function jobsProjection(topology: Topology): Projection<JobEvent> {
  return {
    name: "jobs",
    stream: topology.streams.jobs.name,
    filterSubject: topology.subjects.jobEvents,
    schema: jobEventEnvelope,
    tables: ["jobs"],
    // Only job polls read it: a large job's backlog must not take realtime and segment
    // out of rotation (readiness-rules.ts).
    lagPolicy: "informational",
    async apply(trx: Transaction<Database>, { event, subject, seq }) {
      const workflowId = subject.slice(subject.lastIndexOf(".") + 1);
      const row = await trx.selectFrom("jobs").select(["state"]).where("workflow_id", "=", workflowId).forUpdate().executeTakeFirst();
      const previous: JobState = row ? (row.state as JobState) : initialJobState;
      const next = evolve(previous, event);
      if (next.status === "none") return;
      const values = {
        status: next.status,
        steps: JSON.stringify(stepsView(next)),
        error: next.error ? JSON.stringify(next.error) : null,
        state: JSON.stringify(next),
        last_seq: seq,
        updated_at: new Date(next.updatedAt),
      };
      if (row) {
        await trx.updateTable("jobs").set(values).where("workflow_id", "=", workflowId).execute();
      } else {
        await trx
          .insertInto("jobs")
          .values({
            workflow_id: workflowId,
            request_id: next.spec.requestId,
            owner_id: next.spec.ownerId,
            key_id: next.spec.keyId,
            review: next.spec.review,
            created_at: new Date(next.submittedAt),
            ...values,
          })
          .execute();
      }
    },
  };
}
