import type { Subscription } from "@nats-io/transport-node";
import type { ServerEvent } from "../../schemas/realtime";
import { rtEventEnvelope, toServerEvent, type RtEvent } from "../../domain/sessions/events";
import type { Nats } from "../../shared/nats";
import { withSpanFromHeaders } from "../../shared/telemetry";

const SEEN_EVENT_IDS = 1024;

/** Where a graceful close stands: the VAD has committed everything, and how many committed items still wait for their result. */
export interface FeedProgress {
  vadFlushed: boolean;
  pendingItems: number;
}

/**
 * Session events from the VAD and the transcriber, forwarded to the client as they
 * arrive: a core NATS subscription on rt.evt.<sessionId> (JetStream publishes reach
 * core subscribers too). A core subscriber sees every publish, also those JetStream
 * drops as duplicates (a retried transcription, audio handled again after a VAD
 * takeover): the msg ids seen recently are remembered, so the client gets each event
 * once. `progressed` is called after each forwarded event and at `rt.session.flushed`.
 */
export function forwardSessionEvents(nats: Nats, sessionId: string, send: (event: ServerEvent) => void, progressed: (progress: FeedProgress) => void): Subscription {
  const seen = new Set<string>();
  const pendingItems = new Set<string>();
  let vadFlushed = false;
  const progress = () => progressed({ vadFlushed, pendingItems: pendingItems.size });
  return nats.nc.subscribe(nats.topology.subjects.rtEvent(sessionId), {
    callback: (err, msg) => {
      if (err) return;
      const msgId = msg.headers?.get("Nats-Msg-Id");
      if (msgId) {
        if (seen.has(msgId)) return;
        seen.add(msgId);
        if (seen.size > SEEN_EVENT_IDS) seen.delete(seen.values().next().value!);
      }
      let recorded: RtEvent;
      try {
        recorded = rtEventEnvelope.parse(msg.json());
      } catch {
        return;
      }
      if (recorded.type === "rt.session.flushed") {
        vadFlushed = true;
        return progress();
      }
      const event = toServerEvent(recorded);
      if (!event) return;
      if (event.type === "input_audio_buffer.committed") pendingItems.add(event.item_id);
      if (event.type === "conversation.item.input_audio_transcription.completed" || event.type === "conversation.item.input_audio_transcription.failed") {
        pendingItems.delete(event.item_id);
        // the utterance's last hop: its transcript to the socket, in the utterance's trace
        void withSpanFromHeaders("ws send transcript", msg.headers, async (span) => {
          span.setAttributes({ "session.id": sessionId, "item.id": event.item_id, "event.type": event.type });
          send(event);
        });
      } else send(event);
      progress();
    },
  });
}
