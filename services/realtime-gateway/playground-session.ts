/**
 * The playground's session, as browser JavaScript (playground-page.ts puts it in the
 * page): the credential from the page's own backend (POST /demo/session-token: an `rt_`
 * token for the native door, with `?door=openai` an `ek_` secret for /v1/realtime; the
 * page never sees a key), the socket in either door's protocol, the settings sent in
 * `session.update` (docs/realtime-reference.md; docs/realtime-openai.md for the OpenAI
 * door's shapes; `diarize` there is the door's extension), each door's events turned
 * into the view's calls (playground-view.ts),
 * and resuming after a lost connection (docs/realtime-resume.md): on 1006 or 1012 a new
 * credential, `?resume=` with the last event id (one per channel for a multichannel
 * session), and the audio again from `audio_ms` (playground-audio.ts).
 */
export const PLAYGROUND_SESSION_JS = String.raw`
const T = "conversation.item.input_audio_transcription";
let ws = null, source = null, door = "native", rate = 48000, channels = 1;
let credential = null, lastIds = [], live = false, stopping = false, retries = 0, setting = "";

function chosen() {
  return {
    door: document.querySelector("input[name=door]:checked").value,
    source: document.querySelector("input[name=source]:checked").value,
    turn: $("turn").value,
    eagerness: $("eagerness").value,
    smartFormat: $("smart-format").checked,
    redact: Array.from(document.querySelectorAll("input[name=redact]:checked")).map((e) => e.value),
    interims: $("interims").checked,
    multichannel: $("multichannel").checked,
    diarize: $("diarize").checked,
  };
}
function settingName(c) { return (c.turn === "semantic_vad" ? "semantic_vad " + c.eagerness : "server_vad") + (c.door === "openai" ? " (OpenAI door)" : ""); }

/** The settings as this door's session.update. */
function sessionUpdate(c) {
  const turn = c.turn === "semantic_vad" ? { type: "semantic_vad", eagerness: c.eagerness } : { type: "server_vad" };
  if (door === "openai") {
    return { type: "session.update", session: { type: "transcription", audio: { input: { format: { type: "audio/pcm", rate: 24000 }, transcription: { language: "en", diarize: c.diarize }, turn_detection: turn } } } };
  }
  const transcription = { smart_format: c.smartFormat, interim_results: c.interims, diarize: c.diarize };
  if (c.redact.length) transcription.redact = c.redact;
  return { type: "session.update", session: { turn_detection: turn, input_audio_transcription: transcription } };
}

async function credentialFor() {
  const r = await fetch("/demo/session-token" + (door === "openai" ? "?door=openai" : ""), { method: "POST" });
  const body = await r.json();
  if (!r.ok) throw new Error("token refused: " + (body.error && body.error.message));
  return body;
}

function b64(pcm) {
  const bytes = new Uint8Array(pcm.buffer, pcm.byteOffset, pcm.byteLength);
  let s = "";
  for (let i = 0; i < bytes.length; i += 0x8000) s += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
  return btoa(s);
}
/** Sends a frame when connected; false otherwise (the source keeps it for later). */
function sendAudio(pcm) {
  if (!live || !ws || ws.readyState !== 1) return false;
  if (door === "openai") ws.send(JSON.stringify({ type: "input_audio_buffer.append", audio: b64(pcm) }));
  else ws.send(pcm.buffer.byteLength === pcm.byteLength ? pcm.buffer : pcm.slice().buffer);
  return true;
}

function connect(body) {
  const proto = location.protocol === "https:" ? "wss:" : "ws:";
  const q = new URLSearchParams();
  let protocols;
  if (door === "openai") {
    q.set("intent", "transcription");
    protocols = ["realtime", "openai-insecure-api-key." + body.secret];
  } else {
    q.set("sample_rate", String(rate));
    if (channels === 2) { q.set("channels", "2"); q.set("multichannel", "true"); }
    q.set("access_token", body.token);
  }
  if (credential) {
    q.set("resume", credential);
    const ids = channels === 2 ? [0, 1].map((c) => lastIds[c] || "").join(",") : lastIds[0] || "";
    if (ids.replace(",", "")) q.set("last_event_id", ids);
  }
  ws = new WebSocket(proto + "//" + location.host + body.endpoint + "?" + q.toString(), protocols);
  ws.binaryType = "arraybuffer";
  ws.onmessage = (m) => onEvent(JSON.parse(m.data));
  ws.onclose = onClose;
}

function onEvent(e) {
  if (e.event_id) lastIds[e.channel || 0] = e.event_id;
  const ch = e.channel;
  switch (e.type) {
    case "session.created":
    case "transcription_session.created": {
      credential = e.resume ? e.resume.credential : null;
      ws.send(JSON.stringify(sessionUpdate(chosen())));
      live = true;
      const id = e.session_id || (e.session && e.session.id);
      status("listening (session " + id + (e.plan ? ", " + e.plan + " plan" : "") + ", " + (door === "openai" ? "OpenAI door" : "native door") + ")");
      logConnection("connected: " + id + (credential ? " (resumable)" : ""));
      $("stop").disabled = false;
      source.start();
      break;
    }
    case "session.resumed": {
      credential = e.resume.credential; retries = 0; live = true;
      logConnection("resumed: " + e.replayed + " events caught up, audio again from " + (e.audio_ms / 1000).toFixed(2) + " s", "resumed");
      status("resumed (session " + e.session_id + ", " + e.replayed + " events caught up)");
      source.resendFrom(Math.round((e.audio_ms * rate) / 1000));
      break;
    }
    case "session.updated":
    case "transcription_session.updated": {
      const s = e.session, parts = [];
      const td = s.turn_detection || (s.audio && s.audio.input && s.audio.input.turn_detection);
      parts.push(td ? td.type + (td.eagerness ? " (" + td.eagerness + ")" : "") : "manual");
      const t = s.input_audio_transcription;
      if (t && t.smart_format !== undefined) parts.push("smart format " + (t.smart_format ? "on" : "off"));
      if (t) parts.push("redact " + (t.redact && t.redact.length ? t.redact.join(", ") : "none"));
      const tr = t || (s.audio && s.audio.input && s.audio.input.transcription);
      if (tr && tr.diarize) parts.push("speaker labels");
      view.settingsShown("in effect: " + parts.join(" · "));
      break;
    }
    case "input_audio_buffer.speech_started": view.itemStarted(e.item_id, ch); break;
    case "input_audio_buffer.speech_stopped": view.speechStopped(e.item_id, ch, e.audio_end_ms); break;
    case T + ".delta": view.partial(e.item_id, ch, "delta", e.delta); break;
    case T + ".interim": view.partial(e.item_id, ch, "interim", e.transcript); break;
    case T + ".completed": {
      const last = e.words && e.words.length ? e.words[e.words.length - 1] : null;
      view.final(e.item_id, ch, e.transcript, { startMs: e.audio_start_ms, endMs: e.audio_end_ms, words: e.words, speaker: e.speaker, setting, lastWordEndMs: last ? last.end_ms : null, sentAt: source.sentAt });
      break;
    }
    case T + ".failed": view.failed(e.item_id, ch, e.error.message); break;
    // labels already shown stay as sent; the log says which one now speaks as which
    case "conversation.speaker.merged": logConnection(e.from.replace("_", " ") + " is " + e.into.replace("_", " ") + ": the later label is folded into the earlier one"); break;
    case "error": status("error: " + e.error.message); logConnection("error " + e.error.code + ": " + e.error.message, "failed"); break;
  }
}

function onClose(e) {
  live = false;
  if (source) source.pause();
  if ((e.code === 1006 || e.code === 1012) && credential && !stopping && retries < 8) {
    const wait = Math.min(8000, 250 * 2 ** retries++);
    logConnection("connection lost (" + e.code + "); resuming in " + (wait / 1000).toFixed(2) + " s", "lost");
    status("connection lost; resuming in " + (wait / 1000).toFixed(1) + " s…");
    setTimeout(() => credentialFor().then(connect, (err) => { status("error: " + err.message); cleanup(); }), wait);
    return;
  }
  logConnection("closed " + e.code + (e.reason ? " " + e.reason : ""));
  status("closed " + e.code + (e.reason ? " " + e.reason : ""));
  cleanup();
}

async function start() {
  const c = chosen();
  $("start").disabled = true;
  credential = null; lastIds = []; stopping = false; retries = 0;
  door = c.door; rate = door === "openai" ? 24000 : 48000; setting = settingName(c);
  view.reset();
  if (c.source === "file" && !$("file").files.length) throw new Error("choose an audio file first");
  status("getting a credential from the page's backend…");
  const body = await credentialFor();
  source = await createSource(c.source, {
    rate,
    channels: door === "native" && c.multichannel ? 2 : 1,
    file: $("file").files[0],
    onFrame: sendAudio,
    onEnd: () => stop(),
  });
  channels = source.channels;
  connect(body);
}
function stop() {
  stopping = true;
  if (ws && ws.readyState === 1) ws.send(JSON.stringify({ type: "session.close" }));
  $("stop").disabled = true;
}
function cleanup() {
  if (source) source.stop();
  source = null; live = false;
  $("start").disabled = false; $("stop").disabled = true;
  speaking(false);
}
function doorChanged() {
  const openai = document.querySelector("input[name=door]:checked").value === "openai";
  for (const el of document.querySelectorAll(".native-only input")) el.disabled = openai;
}

$("start").onclick = () => start().catch((err) => { status("error: " + err.message); cleanup(); });
$("stop").onclick = stop;
for (const el of document.querySelectorAll("input[name=door]")) el.onchange = doorChanged;
for (const el of document.querySelectorAll("#settings select, #settings input[type=checkbox]")) {
  el.addEventListener("change", () => {
    const c = chosen();
    setting = settingName(c);
    if (live && ws && ws.readyState === 1) ws.send(JSON.stringify(sessionUpdate(c)));
  });
}
doorChanged();
`;
