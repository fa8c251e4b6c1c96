import { keyEventEnvelope, type KeyEvent } from "./events";
import type { Topology } from "../../shared/nats";
import type { Projection } from "../../shared/projection";

/** KeyIssued / KeyRevoked / KeyUsed → api_keys. */
export function keysProjection(topology: Topology): Projection<KeyEvent> {
  return {
    name: "api_keys",
    stream: topology.streams.keys.name,
    filterSubject: topology.subjects.keyEvents,
    schema: keyEventEnvelope,
    tables: ["api_keys"],
    async apply(trx, { event }) {
      switch (event.type) {
        case "KeyIssued": {
          const d = event.data;
          await trx
            .insertInto("api_keys")
            .values({
              id: d.keyId,
              owner_id: d.ownerId,
              key_hash: d.keyHash,
              key_prefix: d.keyPrefix,
              last_four: d.lastFour,
              plan: d.plan,
              label: d.label,
              expires_at: d.expiresAt,
              revoked_at: null,
              last_used_at: null,
              created_at: d.issuedAt,
              limit_overrides: d.limits ? JSON.stringify(d.limits) : null,
            })
            .onConflict((oc) => oc.column("id").doNothing())
            .execute();
          return;
        }
        case "KeyRevoked":
          await trx.updateTable("api_keys").set({ revoked_at: event.data.revokedAt }).where("id", "=", event.data.keyId).execute();
          return;
        case "KeyUsed":
          await trx.updateTable("api_keys").set({ last_used_at: event.data.usedAt }).where("id", "=", event.data.keyId).execute();
          return;
        default: {
          const never: never = event;
          return never;
        }
      }
    },
  };
}
