import { VAD_TRAILING_MS, type ServerEvent } from "../../schemas/realtime";
import { rtAudioBytes, rtAudioFrames, rtFinal, rtFirstPartial, rtSessionCloses, rtSessionsOpen, rtSessionsOpened, rtTranscripts, rtVadDecision } from "../../shared/metrics";

/** Arrival log: one entry per binary frame, the last 512 (10 s of 20 ms frames). */
const LOG_ENTRIES = 512;

/**
 * A session's share of the realtime metrics (shared/metrics.ts), measured where the
 * client's view is: at the gateway, as events are sent to the socket.
 *
 * - VAD decision: speech_stopped sent − when the gateway received the audio that let the
 *   VAD decide (`audio_end_ms` − the 200 ms of trailing audio + `silence_duration_ms`),
 *   from a small log of audio positions and arrival times;
 * - first partial: the item's first non-empty delta or interim before its speech_stopped
 *   − its speech_started; final: its completed − its speech_stopped.
 * Frames and bytes are counted locally and added to the counters by `flush` (the
 * gateway's sweep, every 250 ms, and at close), not per frame.
 */
export function createSessionMetrics(now: () => number) {
  const at = new Float64Array(LOG_ENTRIES);
  const pos = new Float64Array(LOG_ENTRIES);
  let n = 0;
  let frames = 0;
  let bytes = 0;
  const started = new Map<string, number>();
  const stopped = new Map<string, number>();
  rtSessionsOpened.inc();
  rtSessionsOpen.inc();

  /** When the audio at `ms` on the session's timeline arrived (the first logged position at or past it). */
  const receivedAt = (ms: number): number | undefined => {
    // newest first: the deciding audio is recent
    let found: number | undefined;
    for (let i = n - 1; i >= Math.max(0, n - LOG_ENTRIES) && pos[i % LOG_ENTRIES]! >= ms; i--) found = at[i % LOG_ENTRIES];
    return found;
  };

  return {
    /** A binary frame of `byteLength` bytes arrived; the session's audio now reaches `audioMs`. */
    audio(byteLength: number, audioMs: number) {
      frames++;
      bytes += byteLength;
      pos[n % LOG_ENTRIES] = audioMs;
      at[n % LOG_ENTRIES] = now();
      n++;
    },
    flush() {
      if (frames) rtAudioFrames.inc(frames);
      if (bytes) rtAudioBytes.inc(bytes);
      frames = 0;
      bytes = 0;
    },
    /** An event is being sent to the client. */
    sent(event: ServerEvent, silenceDurationMs: number) {
      const t = now();
      switch (event.type) {
        case "input_audio_buffer.speech_started":
          started.set(event.item_id, t);
          return;
        case "input_audio_buffer.speech_stopped": {
          stopped.set(event.item_id, t);
          started.delete(event.item_id);
          const deciding = receivedAt(event.audio_end_ms - VAD_TRAILING_MS + silenceDurationMs);
          if (deciding !== undefined) rtVadDecision.observe(Math.max(0, t - deciding) / 1000);
          return;
        }
        case "conversation.item.input_audio_transcription.delta":
        case "conversation.item.input_audio_transcription.interim": {
          const since = started.get(event.item_id);
          const text = event.type.endsWith(".delta") ? (event as { delta: string }).delta : (event as { transcript: string }).transcript;
          if (since !== undefined && text) {
            rtFirstPartial.observe((t - since) / 1000);
            started.delete(event.item_id);
          }
          return;
        }
        case "conversation.item.input_audio_transcription.completed":
        case "conversation.item.input_audio_transcription.failed": {
          const since = stopped.get(event.item_id);
          if (event.type.endsWith(".completed") && since !== undefined) rtFinal.observe((t - since) / 1000);
          rtTranscripts.inc({ outcome: event.type.endsWith(".completed") ? "completed" : "failed" });
          stopped.delete(event.item_id);
          started.delete(event.item_id);
          return;
        }
        default:
          return;
      }
    },
    closed(code: number) {
      this.flush();
      rtSessionsOpen.dec();
      rtSessionCloses.inc({ code: String(code) });
    },
  };
}
