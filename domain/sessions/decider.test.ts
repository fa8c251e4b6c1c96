import { describe, expect, it } from "vitest";
import { defaultTurnDetection } from "../../schemas/realtime";
import type { VadEvent } from "../../shared/audio/vad";
import { decide, initialState, type DecideContext, type DeciderInput, type DeciderState, type Effect, type StartControl } from "./decider";
import { sessionEventId } from "./store";

const sessionId = "sess_0123456789abcdef";
const start: StartControl = {
  kind: "start",
  turn_detection: defaultTurnDetection,
  language: "en",
  prompt: "Dashwood",
  model: null,
  max_concurrent_utterances: 2,
  key_id: "key_a",
};
const NOW = 1_800_000_000_000;
const begin = (settings: StartControl = start): DeciderInput => ({ kind: "start", settings });

function context(): DecideContext {
  let n = 0;
  return { sessionId, now: NOW, newId: () => `evt_${++n}` };
}

/** given(inputs…).when(input) → the decision on the state the inputs left. */
function given(...inputs: DeciderInput[]) {
  let state: DeciderState | null = null;
  for (const input of inputs) state = decide(input, state, context()).state;
  return { state, when: (input: DeciderInput) => decide(input, state, context()) };
}

const pcm = (ms: number) => new Int16Array((ms * 16000) / 1000);
const started = (ms: number): VadEvent => ({ kind: "speech_started", audioStartMs: ms });
const stopped = (ms: number): VadEvent => ({ kind: "speech_stopped", audioEndMs: ms });
const utterance = (from: number, to: number, reason: "vad" | "commit" | "max_length" | "close" = "vad"): VadEvent => ({ kind: "utterance", audioStartMs: from, audioEndMs: to, pcm: pcm(to - from), reason });
const audio = (...vad: VadEvent[]): DeciderInput => ({ kind: "audio", vad });

/** The effects with each event's key replaced by the event id the sessions store gives it. */
const withIds = (effects: Effect[]) => effects.map((f) => (f.kind === "event" ? { kind: f.kind, id: sessionEventId(sessionId, f.event, f.key), event: f.event } : f));
/** The server events of a decision as `[event id, type, item]`, in order. */
const eventsOf = (effects: Effect[]) =>
  effects.flatMap((f) => (f.kind === "event" ? [[sessionEventId(sessionId, f.event, f.key), f.event.type === "rt.server_event" ? f.event.data.type : f.event.type, f.event.type === "rt.server_event" && "item_id" in f.event.data ? f.event.data.item_id : null]] : []));
const kinds = (effects: Effect[]) => effects.map((f) => f.kind);
const item = (ms: number) => `item_0123456789ab_${String(ms).padStart(8, "0")}`;

describe("session start and settings", () => {
  it("start: a fresh state, the open stream dropped, the settings kept for a takeover", () => {
    const d = given().when(begin());
    expect(d.state).toEqual({ settings: start, lastItemMs: -1, currentItem: null, previousItem: null });
    expect(d.effects).toEqual([{ kind: "drop_stream" }, { kind: "settings", settings: start }]);
  });

  it("a second start restarts the session: item ids begin again from the timeline", () => {
    const d = given(begin(), audio(started(500))).when(begin());
    expect(d.state!.currentItem).toBeNull();
    expect(d.state!.lastItemMs).toBe(-1);
  });

  it("update: the new turn detection and transcription settings, interim cadence kept when not given", () => {
    const withCadence = { ...start, partial_interval_ms: 500, interim_results: true };
    const update = { kind: "update" as const, turn_detection: { ...defaultTurnDetection, silence_duration_ms: 900 }, language: "de", prompt: null, model: "m", smart_format: false };
    const d = given(begin(withCadence)).when({ kind: "update", update });
    const expected = { ...withCadence, turn_detection: update.turn_detection, language: "de", prompt: null, model: "m", smart_format: false };
    expect(d.state!.settings).toEqual(expected);
    expect(d.effects).toEqual([{ kind: "settings", settings: expected }]);
  });

  it("update without transcription settings keeps the session's smart_format, interim cadence and results", () => {
    const off = { ...start, smart_format: false, interim_results: true, partial_interval_ms: 400 };
    const update = { kind: "update" as const, turn_detection: defaultTurnDetection, language: "en", prompt: null, model: null };
    expect(given(begin(off)).when({ kind: "update", update }).state!.settings).toMatchObject({ smart_format: false, interim_results: true, partial_interval_ms: 400 });
    expect(given(begin({ ...start, smart_format: true })).when({ kind: "update", update }).state!.settings.smart_format).toBe(true);
  });

  it("audio the segmenter made nothing of decides nothing (unlike an empty commit, no error)", () => {
    const g = given(begin(), audio(started(1000)));
    expect(g.when(audio())).toEqual({ state: g.state, effects: [] });
  });

  it("inputs for a session never started decide nothing", () => {
    expect(given().when(audio(started(0)))).toEqual({ state: null, effects: [] });
  });
});

describe("speech", () => {
  it("speech_started: an item named by where it starts on the timeline, a decoder may take it", () => {
    const d = given(begin()).when(audio(started(1230)));
    expect(withIds(d.effects)).toEqual([
      { kind: "open_stream", item: item(1230), startSample: 1230 * 16 },
      { kind: "event", id: `${sessionId}:input_audio_buffer.speech_started:${item(1230)}`, event: { type: "rt.server_event", data: { type: "input_audio_buffer.speech_started", event_id: "evt_1", item_id: item(1230), audio_start_ms: 1230 } } },
    ]);
    expect(d.state!.currentItem).toBe(item(1230));
  });

  it("speech_stopped and the VAD's commit: the same item, committed before its transcribe command", () => {
    const d = given(begin(), audio(started(1000))).when(audio(stopped(3000), utterance(1000, 3000)));
    expect(eventsOf(d.effects)).toEqual([
      [`${sessionId}:input_audio_buffer.speech_stopped:${item(1000)}`, "input_audio_buffer.speech_stopped", item(1000)],
      [`${sessionId}:input_audio_buffer.committed:${item(1000)}`, "input_audio_buffer.committed", item(1000)],
    ]);
    expect(kinds(d.effects)).toEqual(["event", "event", "utterance"]);
    const committed = d.effects[1]!;
    expect(committed.kind === "event" && committed.event.data).toMatchObject({ previous_item_id: null, audio_start_ms: 1000, audio_end_ms: 3000, reason: "vad" });
    const command = d.effects[2]!;
    expect(command.kind === "utterance" && command.command).toEqual({
      session_id: sessionId,
      item_id: item(1000),
      key_id: "key_a",
      audio_start_ms: 1000,
      audio_end_ms: 3000,
      language: "en",
      prompt: "Dashwood",
      model: null,
      max_concurrent_utterances: 2,
      decided_at: NOW,
    });
    expect(command.kind === "utterance" && command.pcm.length).toBe(32_000);
    expect(d.state).toMatchObject({ currentItem: null, previousItem: item(1000) });
  });

  it("speech_stopped tells the client where the speech ended, exactly as the segmenter found it", () => {
    const d = given(begin(), audio(started(1000))).when(audio(stopped(2970)));
    expect(withIds(d.effects)).toEqual([
      {
        kind: "event",
        id: `${sessionId}:input_audio_buffer.speech_stopped:${item(1000)}`,
        event: { type: "rt.server_event", data: { type: "input_audio_buffer.speech_stopped", event_id: "evt_1", item_id: item(1000), audio_end_ms: 2970 } },
      },
    ]);
    // the item stays open until its utterance is committed
    expect(d.state).toMatchObject({ currentItem: item(1000), previousItem: null, lastItemMs: 1000 });
  });

  it("speech_stopped with no item open (after a takeover mid-utterance) names an item where the speech ended", () => {
    const d = given(begin()).when(audio(stopped(4500)));
    expect(eventsOf(d.effects)).toEqual([[`${sessionId}:input_audio_buffer.speech_stopped:${item(4500)}`, "input_audio_buffer.speech_stopped", item(4500)]]);
    expect(d.effects[0]!.kind === "event" && d.effects[0]!.event.data).toMatchObject({ audio_end_ms: 4500 });
    expect(d.state).toMatchObject({ currentItem: item(4500), lastItemMs: 4500 });
  });

  it("the command carries the session's owner when the start named it (fair scheduling without a lookup)", () => {
    const d = given(begin({ ...start, owner_id: "acme" }), audio(started(1000))).when(audio(stopped(3000), utterance(1000, 3000)));
    const command = d.effects.find((f) => f.kind === "utterance");
    expect(command?.kind === "utterance" && command.command).toMatchObject({ key_id: "key_a", owner_id: "acme" });
  });

  it("the next item points back to the previous one", () => {
    const d = given(begin(), audio(started(0), stopped(900), utterance(0, 900))).when(audio(started(2000), stopped(2900), utterance(2000, 2900)));
    const committed = d.effects.find((f) => f.kind === "event" && f.event.type === "rt.server_event" && f.event.data.type === "input_audio_buffer.committed");
    expect(committed?.kind === "event" && committed.event.data).toMatchObject({ item_id: item(2000), previous_item_id: item(0) });
  });

  it("max_length: the utterance is committed with that reason and speech goes on as a new item", () => {
    const d = given(begin(), audio(started(0))).when(audio(utterance(0, 30_000, "max_length"), started(30_000)));
    expect(kinds(d.effects)).toEqual(["event", "utterance", "open_stream", "event"]);
    expect(eventsOf(d.effects).map((e) => e[2])).toEqual([item(0), item(30_000)]);
    const committed = d.effects[0]!;
    expect(committed.kind === "event" && committed.event.data).toMatchObject({ reason: "max_length" });
    expect(d.state!.currentItem).toBe(item(30_000));
  });

  it("item ids never repeat, even for two items starting in the same millisecond", () => {
    const d = given(begin(), audio(started(500), utterance(500, 500, "commit"))).when(audio(started(500)));
    expect(d.state!.currentItem).toBe(item(501));
  });

  it("the same inputs decide the same dedup ids (a redelivery or a takeover stores each event once)", () => {
    const a = given(begin(), audio(started(1000))).when(audio(stopped(2000), utterance(1000, 2000)));
    const b = given(begin(), audio(started(1000))).when(audio(stopped(2000), utterance(1000, 2000)));
    expect(eventsOf(a.effects)).toEqual(eventsOf(b.effects));
  });

  it("smart_format off travels in the transcribe command", () => {
    const d = given(begin({ ...start, smart_format: false }), audio(started(0))).when(audio(utterance(0, 800)));
    const command = d.effects.find((f) => f.kind === "utterance");
    expect(command?.kind === "utterance" && command.command.smart_format).toBe(false);
  });
});

describe("client controls", () => {
  it("commit with speech open: committed with reason commit, then the command", () => {
    const d = given(begin(), audio(started(400))).when({ kind: "commit", vad: [stopped(1500), utterance(400, 1500, "commit")], seq: 7, clientEventId: "c1" });
    expect(kinds(d.effects)).toEqual(["event", "event", "utterance"]);
    const committed = d.effects[1]!;
    expect(committed.kind === "event" && committed.event.data).toMatchObject({ type: "input_audio_buffer.committed", item_id: item(400), reason: "commit" });
  });

  it("commit with nothing open: an error naming the client's event, its dedup id from the control's place in the session", () => {
    const d = given(begin()).when({ kind: "commit", vad: [], seq: 7, clientEventId: "c1" });
    expect(withIds(d.effects)).toEqual([
      {
        kind: "event",
        id: `${sessionId}:error:control-7`,
        event: {
          type: "rt.server_event",
          data: { type: "error", event_id: "evt_1", error: { type: "invalid_request_error", code: "input_audio_buffer_commit_empty", message: "Nothing to commit: no speech is in progress.", event_id: "c1" } },
        },
      },
    ]);
    expect(d.state).toEqual(given(begin()).state);
  });

  it("clear: the open item is dropped (never committed) and cleared is answered once per control", () => {
    const d = given(begin(), audio(started(400))).when({ kind: "clear", seq: 9 });
    expect(withIds(d.effects)).toEqual([
      { kind: "drop_stream" },
      { kind: "event", id: `${sessionId}:input_audio_buffer.cleared:control-9`, event: { type: "rt.server_event", data: { type: "input_audio_buffer.cleared", event_id: "evt_1" } } },
    ]);
    expect(d.state!.currentItem).toBeNull();
    // speech after the clear is a new item
    const after = decide(audio(started(2000)), d.state, context());
    expect(after.state!.currentItem).toBe(item(2000));
  });
});

describe("session end", () => {
  it("end with flush: the open utterance committed with reason close, then flushed, the settings deleted, the session over", () => {
    const d = given(begin(), audio(started(100))).when({ kind: "end", flush: true, vad: [stopped(900), utterance(100, 900, "close")] });
    expect(kinds(d.effects)).toEqual(["event", "event", "utterance", "event", "drop_stream", "settings"]);
    expect(eventsOf(d.effects)).toEqual([
      [`${sessionId}:input_audio_buffer.speech_stopped:${item(100)}`, "input_audio_buffer.speech_stopped", item(100)],
      [`${sessionId}:input_audio_buffer.committed:${item(100)}`, "input_audio_buffer.committed", item(100)],
      [`${sessionId}:flushed`, "rt.session.flushed", null],
    ]);
    expect(d.effects.at(-1)).toEqual({ kind: "settings", settings: null });
    expect(d.state).toBeNull();
  });

  it("end with flush and nothing open: only flushed", () => {
    const d = given(begin()).when({ kind: "end", flush: true, vad: [] });
    expect(eventsOf(d.effects)).toEqual([[`${sessionId}:flushed`, "rt.session.flushed", null]]);
    expect(withIds(d.effects)[0]).toEqual({ kind: "event", id: `${sessionId}:flushed`, event: { type: "rt.session.flushed", data: { session_id: sessionId } } });
    expect(d.state).toBeNull();
  });

  it("end without flush (the client went away): open speech is dropped, no events", () => {
    const d = given(begin(), audio(started(100))).when({ kind: "end", flush: false, vad: [] });
    expect(d.effects).toEqual([{ kind: "drop_stream" }, { kind: "settings", settings: null }]);
    expect(d.state).toBeNull();
  });

  it("a restored session (takeover) starts from its saved settings", () => {
    const d = decide(audio(started(5000)), initialState(start), context());
    expect(d.state!.currentItem).toBe(item(5000));
  });
});

describe("semantic_vad's early turn events", () => {
  const semantic = (early: boolean): StartControl => ({ ...start, turn_detection: { ...defaultTurnDetection, type: "semantic_vad", eagerness: "auto", early_turn_events: early } });
  const likely: DeciderInput = { kind: "turn_end_likely", atSample: 16_000, transcript: "for them" };
  const resumed: DeciderInput = { kind: "turn_resumed", atSample: 20_800 };

  it("given early_turn_events, turn_end_likely and turn_resumed for the open item, keyed by their place on the timeline", () => {
    const d = given(begin(semantic(true)), audio(started(100))).when(likely);
    expect(withIds(d.effects)).toEqual([
      {
        kind: "event",
        id: `${sessionId}:input_audio_buffer.turn_end_likely:${item(100)}:16000`,
        event: { type: "rt.server_event", data: { type: "input_audio_buffer.turn_end_likely", event_id: "evt_1", item_id: item(100), audio_end_ms: 1000, transcript: "for them" } },
      },
    ]);
    const r = given(begin(semantic(true)), audio(started(100)), likely).when(resumed);
    expect(eventsOf(r.effects)).toEqual([[`${sessionId}:input_audio_buffer.turn_resumed:${item(100)}:20800`, "input_audio_buffer.turn_resumed", item(100)]]);
    expect(r.state).toEqual(d.state);
  });
  it("given them off (the default), or server_vad, or no open item: nothing", () => {
    expect(given(begin(semantic(false)), audio(started(100))).when(likely).effects).toEqual([]);
    expect(given(begin(), audio(started(100))).when(likely).effects).toEqual([]);
    expect(given(begin(semantic(true))).when(resumed).effects).toEqual([]);
  });
});

describe("resume", () => {
  it("answers a resume with where the timeline stands, named by the control's place; the open item stays open", () => {
    const g = given(begin(), audio(started(1000)));
    const d = g.when({ kind: "resume", gen: 1, position: 40_000, seq: 2 ** 20 });
    expect(withIds(d.effects)).toEqual([
      { kind: "event", id: `${sessionId}:resumed:control-${2 ** 20}`, event: { type: "rt.session.resumed", data: { session_id: sessionId, gen: 1, position: 40_000 } } },
    ]);
    expect(d.state).toEqual(g.when(audio()).state);
  });
});
