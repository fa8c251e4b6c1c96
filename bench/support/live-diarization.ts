import WebSocket from "ws";
import type { LabelledTurn } from "../../domain/diarization/der";

/** What a client of a diarizing session got back for one conversation. */
export interface LiveRun {
  /** The speaker turns the session's items and words give (below). */
  turns: LabelledTurn[];
  items: number;
  /** `conversation.speaker.merged` events. */
  merged: number;
  /** Items that came without a `speaker`. */
  unlabelled: number;
  /** The server closed the session before the end: its code and reason. */
  closed?: string;
}

interface Completed {
  audio_start_ms: number;
  audio_end_ms: number;
  speaker?: string;
  words?: { start_ms: number; end_ms: number; speaker?: string }[];
}

/**
 * One conversation through a realtime session of the native door with `diarize: true`,
 * as a client streams it: 100 ms binary frames at `speed` × real time once the session
 * says `session.updated`, then 2 s of silence and a commit, and the session closed once
 * the commit is answered and every committed item has its `completed`. The turns are what that client can read off the
 * events: an item is a turn of its `speaker` from `audio_start_ms` to `audio_end_ms`
 * (its padding included); an item whose words carry speakers (a change of speaker inside
 * it) is cut halfway between the two words where the speaker changes.
 */
export async function streamDiarized(port: number, key: string, pcm: Int16Array, speed = 1, turn: Record<string, number> = {}): Promise<LiveRun> {
  const ws = new WebSocket(`ws://127.0.0.1:${port}/v1/audio/transcriptions/stream`, { headers: { authorization: `Bearer ${key}` } });
  const completed: Completed[] = [];
  let committed = 0;
  let merged = 0;
  let failed: string | undefined;
  // the answer to the commit sent after the audio: the VAD has read all of it
  let heardAll = false;
  let onEvent = () => {};
  let closed: string | undefined;
  let finished = false;
  ws.on("close", (code, reason) => {
    if (!finished) closed = `${code} ${reason.toString()}`;
    onEvent();
  });
  const updated = new Promise<void>((resolve, reject) => {
    ws.on("message", (data) => {
      const e = JSON.parse(data.toString());
      if (e.type === "session.created") ws.send(JSON.stringify({ type: "session.update", session: { input_audio_transcription: { diarize: true }, ...(Object.keys(turn).length ? { turn_detection: { type: "server_vad", ...turn } } : {}) } }));
      else if (e.type === "session.updated") resolve();
      else if (e.type === "input_audio_buffer.committed") {
        committed++;
        if (e.reason === "commit") heardAll = true;
      } else if (e.type === "error" && e.error?.code === "input_audio_buffer_commit_empty") heardAll = true;
      else if (e.type === "conversation.item.input_audio_transcription.completed") completed.push(e);
      else if (e.type === "conversation.item.input_audio_transcription.failed") completed.push({ audio_start_ms: 0, audio_end_ms: 0 });
      else if (e.type === "conversation.speaker.merged") merged++;
      else if (e.type === "error") failed = `${e.error?.code}: ${e.error?.message}`;
      onEvent();
    });
    ws.once("unexpected-response", (_req, res) => reject(new Error(`session refused: ${res.statusCode}`)));
    ws.once("error", reject);
  });
  await updated;
  const audio = new Int16Array(pcm.length + 32_000);
  audio.set(pcm);
  const frame = 1_600;
  const started = performance.now();
  for (let at = 0; at < audio.length && ws.readyState === WebSocket.OPEN; at += frame) {
    ws.send(audio.subarray(at, at + frame));
    const due = started + ((at + frame) / 16 / speed);
    const wait = due - performance.now();
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));
  }
  // a commit after the audio is answered once the session's VAD has read all of it (the
  // audio before it ended its last item: `input_audio_buffer_commit_empty`); then every
  // committed item's `completed` (two minutes at most)
  if (ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ type: "input_audio_buffer.commit" }));
  await new Promise<void>((resolve) => {
    const deadline = setTimeout(resolve, 120_000);
    onEvent = () => {
      if ((heardAll && completed.length >= committed) || closed) {
        clearTimeout(deadline);
        resolve();
      }
    };
    onEvent();
  });
  finished = true;
  ws.close();
  if (failed) throw new Error(`the session said ${failed}`);
  const turns: LabelledTurn[] = [];
  let unlabelled = 0;
  for (const item of completed) {
    if (!item.speaker) {
      unlabelled++;
      continue;
    }
    let from = item.audio_start_ms;
    let speaker = item.words?.[0]?.speaker ?? item.speaker;
    const words = item.words ?? [];
    for (let i = 1; i < words.length; i++) {
      const next = words[i]!.speaker ?? item.speaker;
      if (next === speaker) continue;
      const cut = (words[i - 1]!.end_ms + words[i]!.start_ms) / 2;
      turns.push({ start: from / 1000, end: cut / 1000, speaker });
      [from, speaker] = [cut, next];
    }
    turns.push({ start: from / 1000, end: item.audio_end_ms / 1000, speaker });
  }
  return { turns, items: completed.length, merged, unlabelled, ...(closed ? { closed } : {}) };
}
