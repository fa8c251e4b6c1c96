import { VAD_TRAILING_MS, type ServerEvent } from "../../schemas/realtime";
import { rtAudioBytes, rtAudioFrames, rtFinal, rtFirstPartial, rtSessionCloses, rtSessionsOpen, rtSessionsOpened, rtTranscripts, rtVadDecision } from "../../shared/metrics";

/** Arrival log: one entry per binary frame, the last 512 (10 s of 20 ms frames). */
const LOG_ENTRIES = 512;
/** How far back the session's pacing is read for "when the audio was due" (below). */
export const PACING_WINDOW_MS = 2000;
/** Which of the window's frames sets the pace: the tenth least behind (below). */
const PACING_QUANTILE = 0.1;

/**
 * A session's share of the realtime metrics (shared/metrics.ts), measured where the
 * client's view is: at the gateway, as events are sent to the socket.
 *
 * - VAD decision: speech_stopped sent − when the audio that let the VAD decide
 *   (`audio_end_ms` − the 200 ms of trailing audio + `silence_duration_ms`) was due,
 *   from a small log of audio positions and arrival times (`dueAt`). A real-time client
 *   sends audio as it is captured, so a frame that reaches the gateway's event loop late
 *   (the process was busy: its frames wait in the socket) arrived after it was due; the
 *   client saw that wait, so it is counted;
 * - first partial: the item's first non-empty delta or interim before its speech_stopped
 *   − its speech_started; final: its completed − its speech_stopped.
 * Frames and bytes are counted locally and added to the counters by `flush` (the
 * gateway's sweep, every 250 ms, and at close), not per frame.
 */
export function createSessionMetrics(now: () => number, onDecision?: (latencyMs: number) => void) {
  const at = new Float64Array(LOG_ENTRIES);
  const pos = new Float64Array(LOG_ENTRIES);
  let n = 0;
  let frames = 0;
  let bytes = 0;
  const started = new Map<string, number>();
  const stopped = new Map<string, number>();
  rtSessionsOpened.inc();
  rtSessionsOpen.inc();

  /**
   * When the audio at `ms` on the session's timeline was due: its frame's arrival, or
   * earlier if the session's own pacing says so. Each frame that arrived in the
   * PACING_WINDOW_MS up to the deciding frame (that one included) says how far behind
   * the timeline it arrived (arrival − position); the tenth least behind of those, plus
   * the deciding frame's position, is when that frame was due, never later than its
   * arrival. So a frame read late after a busy spell, or while the process keeps falling
   * behind, is measured from where the session's timely frames say it was sent; a
   * single early outlier does not set the pace (the earliest frame would count ordinary
   * send jitter as latency); a client sending faster than real time gets its arrival
   * time (its earlier frames arrived further behind the timeline); a client that paused
   * sending for longer than the window starts afresh.
   */
  const lags: number[] = [];
  const dueAt = (ms: number): number | undefined => {
    // newest first: the deciding audio is recent
    let d = -1;
    for (let i = n - 1; i >= Math.max(0, n - LOG_ENTRIES) && pos[i % LOG_ENTRIES]! >= ms; i--) d = i;
    if (d < 0) return undefined;
    const arrived = at[d % LOG_ENTRIES]!;
    const position = pos[d % LOG_ENTRIES]!;
    lags.length = 0;
    for (let i = d; i >= Math.max(0, n - LOG_ENTRIES); i--) {
      const a = at[i % LOG_ENTRIES]!;
      if (a < arrived - PACING_WINDOW_MS) break;
      lags.push(a - pos[i % LOG_ENTRIES]!);
    }
    lags.sort((x, y) => x - y);
    return Math.min(arrived, lags[Math.floor(lags.length * PACING_QUANTILE)]! + position);
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
    /**
     * An event is being sent to the client. `silenceDurationMs`: server_vad's silence;
     * null for semantic_vad, whose decision point the event does not tell (anywhere from
     * its shortest to its longest wait), so its decisions are not measured.
     */
    sent(event: ServerEvent, silenceDurationMs: number | null) {
      const t = now();
      switch (event.type) {
        case "input_audio_buffer.speech_started":
          started.set(event.item_id, t);
          return;
        case "input_audio_buffer.speech_stopped": {
          stopped.set(event.item_id, t);
          started.delete(event.item_id);
          if (silenceDurationMs === null) return;
          const deciding = dueAt(event.audio_end_ms - VAD_TRAILING_MS + silenceDurationMs);
          if (deciding !== undefined) {
            rtVadDecision.observe(Math.max(0, t - deciding) / 1000);
            onDecision?.(Math.max(0, t - deciding));
          }
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
