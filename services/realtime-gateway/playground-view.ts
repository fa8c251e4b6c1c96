/**
 * The playground's view, as browser JavaScript (playground-page.ts puts it in the page):
 * open items with their live partials, finals with their timing, the latency of each
 * turn per turn-detection setting, and the connection's log (lost, resuming, resumed).
 *
 * Events of both doors come here in one shape: `itemStarted`, `partial` (a delta
 * appended, or an interim replacing the running text), `speechStopped`, `final`,
 * `failed`. Timing is the browser's clock (`performance.now()`): a final's "after
 * speech_stopped" is when it arrived after that event did; a turn's "ended after the
 * speech" is when speech_stopped arrived after the frame holding the speech's end was
 * sent: the turn detection's wait as this page lived it, network and capture buffers
 * included. The speech's end is the later of the final's last word's end (its `words`;
 * the OpenAI door's finals have none) and speech_stopped's `audio_end_ms` less the
 * 200 ms the VAD keeps at most after the last voiced frame (docs/realtime-reference.md,
 * "Server VAD"): both are at or before the last voiced frame's end, so the wait reads
 * long rather than short when a word was missed. (`VAD_TRAILING_MS` is the page's, from
 * schemas/realtime.ts.)
 */
export const PLAYGROUND_VIEW_JS = String.raw`
const $ = (id) => document.getElementById(id);
const items = new Map(); // item_id -> { el, text, interim, partials, stoppedAt, turnMs, setting }
const stats = new Map(); // turn-detection setting -> { turns, waits: [], finals: [] }
let pageStart = performance.now();

function status(text) { $("status-text").textContent = text; }
function speaking(on) { $("speaking").className = on ? "on" : ""; }
function clock() { return ((performance.now() - pageStart) / 1000).toFixed(1) + " s"; }
function logConnection(text, cls) {
  const li = document.createElement("li");
  if (cls) li.className = cls;
  li.textContent = clock() + "  " + text;
  $("connection").append(li);
}
function label(channel, speaker) {
  const parts = [];
  if (channel !== undefined && channel !== null) parts.push("ch " + channel);
  if (speaker !== undefined && speaker !== null) parts.push(String(speaker).replace("_", " "));
  return parts.join(" · ");
}

function itemOf(id, channel) {
  let it = items.get(id);
  if (!it) {
    const el = document.createElement("p");
    el.className = "open";
    el.dataset.item = id;
    it = { el, text: "", interim: "", partials: 0, interims: 0, stoppedAt: null, audioEndMs: null, turnMs: null, whileSpeaking: null, channel };
    items.set(id, it);
    $("live").append(el);
  }
  return it;
}
function drawOpen(it) {
  it.el.textContent = "";
  const tag = label(it.channel);
  if (tag) { const b = document.createElement("b"); b.textContent = tag; it.el.append(b); }
  const shown = document.createElement("span");
  shown.className = "stable";
  shown.textContent = it.text;
  const rest = document.createElement("span");
  rest.className = "interim";
  rest.textContent = it.interim.startsWith(it.text.trim()) ? it.interim.slice(it.text.trim().length) : it.interim ? "  (" + it.interim + ")" : "";
  it.el.append(shown, rest);
}

const view = {
  reset() {
    items.clear();
    $("live").textContent = "";
  },
  itemStarted(id, channel) { itemOf(id, channel); speaking(true); },
  partial(id, channel, kind, text) {
    const it = itemOf(id, channel);
    if (kind === "delta") it.text += text; else { it.interim = text; it.interims++; }
    it.partials++;
    drawOpen(it);
  },
  speechStopped(id, channel, audioEndMs) {
    const it = itemOf(id, channel);
    it.stoppedAt = performance.now();
    it.audioEndMs = audioEndMs;
    it.whileSpeaking = it.partials;
    speaking(false);
  },
  final(id, channel, transcript, opts) {
    const it = itemOf(id, channel);
    it.el.remove();
    items.delete(id);
    if (!transcript.trim()) return;
    const finalMs = it.stoppedAt === null ? null : Math.round(performance.now() - it.stoppedAt);
    const ends = [opts.lastWordEndMs, it.audioEndMs === null ? null : it.audioEndMs - VAD_TRAILING_MS].filter((x) => x !== null && x !== undefined);
    const speechEndSentAt = ends.length ? opts.sentAt(Math.max.apply(null, ends)) : null;
    it.turnMs = it.stoppedAt === null || speechEndSentAt === null ? null : Math.max(0, Math.round(it.stoppedAt - speechEndSentAt));
    const li = document.createElement("li");
    li.dataset.item = id;
    li.dataset.partials = String(it.partials);
    li.dataset.interims = String(it.interims);
    if (it.whileSpeaking !== null) li.dataset.whileSpeaking = String(it.whileSpeaking);
    if (finalMs !== null) li.dataset.finalMs = String(finalMs);
    if (it.turnMs !== null) li.dataset.turnMs = String(it.turnMs);
    if (opts.startMs !== undefined) li.dataset.startMs = String(opts.startMs);
    if (opts.endMs !== undefined) li.dataset.endMs = String(opts.endMs);
    const small = document.createElement("small");
    small.textContent = opts.startMs === undefined ? clock() : (opts.startMs / 1000).toFixed(1) + " s";
    li.append(small);
    const tag = label(channel, opts.speaker);
    if (tag) { const b = document.createElement("b"); b.textContent = tag; li.append(b); }
    const text = document.createElement("span");
    text.className = "text";
    // words labelled with a speaker are shown in runs, each run with its label
    const words = opts.words || [];
    if (words.some((w) => w.speaker !== undefined)) {
      let run = null;
      for (const w of words) {
        if (!run || run.speaker !== w.speaker) { run = { speaker: w.speaker, el: document.createElement("span") }; run.el.className = "speaker"; run.el.dataset.speaker = String(w.speaker); run.el.textContent = "[" + label(undefined, w.speaker) + "] "; text.append(run.el); }
        run.el.textContent += (w.punctuated_word || w.word) + " ";
      }
    } else text.textContent = transcript;
    li.append(text);
    const timing = document.createElement("span");
    timing.className = "timing";
    const bits = [it.partials + " partial" + (it.partials === 1 ? "" : "s") + " before it" + (it.whileSpeaking ? " (" + it.whileSpeaking + " while speaking)" : "")];
    if (finalMs !== null) bits.push("final +" + finalMs + " ms after speech_stopped");
    if (it.turnMs !== null) bits.push("turn ended " + it.turnMs + " ms after the speech (" + opts.setting + ")");
    timing.textContent = bits.join(" · ");
    li.append(timing);
    $("transcripts").append(li);
    view.count(opts.setting, it.turnMs, finalMs);
  },
  failed(id, channel, message) {
    const it = items.get(id);
    if (it) { it.el.remove(); items.delete(id); }
    const li = document.createElement("li");
    li.className = "failed";
    li.textContent = "(transcription failed: " + message + ")";
    $("transcripts").append(li);
  },
  count(setting, turnMs, finalMs) {
    const s = stats.get(setting) || { turns: 0, waits: [], finals: [] };
    s.turns++;
    if (turnMs !== null) s.waits.push(turnMs);
    if (finalMs !== null) s.finals.push(finalMs);
    stats.set(setting, s);
    const median = (xs) => {
      if (!xs.length) return "–";
      const ys = xs.slice().sort((a, b) => a - b), m = ys.length >> 1;
      return Math.round(ys.length % 2 ? ys[m] : (ys[m - 1] + ys[m]) / 2) + " ms";
    };
    const body = $("latency").querySelector("tbody");
    body.textContent = "";
    for (const [name, v] of stats) {
      const tr = document.createElement("tr");
      for (const cell of [name, String(v.turns), median(v.waits), median(v.finals)]) { const td = document.createElement("td"); td.textContent = cell; tr.append(td); }
      body.append(tr);
    }
  },
  settingsShown(text) { $("effective").textContent = text; },
};
`;
