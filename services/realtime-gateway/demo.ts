import type { HttpRequest, HttpResponse } from "@trufflesuite/uws-js-unofficial";
import { REALTIME_PATH } from "../../schemas/realtime";
import { authenticateApiKey, issueSessionToken } from "../../domain/keys/auth";
import type { Config } from "../../shared/config";
import type { Db } from "../../shared/db/index";
import { AppError, toAppError } from "../../shared/errors";

/**
 * The demo: GET /demo is a page that streams the microphone to the realtime endpoint
 * and shows live transcripts; POST /demo/session-token is the demo's "customer backend":
 * it holds the operator's demo key (RT_DEMO_API_KEY, server-side only) and hands the
 * browser a 60-second `rt_` session token, exactly what a customer backend does with
 * POST /v1/audio/transcriptions/session-token. Without RT_DEMO_API_KEY the token route
 * answers 503 demo_disabled. The page never sees a key.
 */
export interface DemoDeps {
  config: Config;
  db: Db;
  now: () => Date;
}

/** Returns true when the request was a demo route (and is being answered). */
export function handleDemoRoutes(res: HttpResponse, req: HttpRequest, deps: DemoDeps): boolean {
  const url = req.getUrl();
  const method = req.getMethod().toLowerCase();
  if ((url === "/demo" || url === "/demo/") && method === "get") {
    res.writeStatus("200 OK");
    res.writeHeader("content-type", "text/html; charset=utf-8");
    res.writeHeader("cache-control", "no-store");
    res.writeHeader("content-security-policy", "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self' ws: wss:");
    res.end(DEMO_HTML);
    return true;
  }
  if (url === "/demo/session-token" && method === "post") {
    let aborted = false;
    res.onAborted(() => {
      aborted = true;
    });
    res.onData(() => undefined); // body ignored
    issueDemoToken(deps).then(
      (body) => !aborted && res.cork(() => res.writeStatus("200 OK").writeHeader("content-type", "application/json").writeHeader("cache-control", "no-store").end(JSON.stringify(body))),
      (err) => {
        const e = toAppError(err);
        if (aborted) return;
        res.cork(() =>
          res
            .writeStatus(`${e.status} ${e.status === 503 ? "Service Unavailable" : "Error"}`)
            .writeHeader("content-type", "application/json")
            .end(JSON.stringify({ error: { message: e.message, type: e.status >= 500 ? "server_error" : "invalid_request_error", code: e.code } })),
        );
      },
    );
    return true;
  }
  return false;
}

async function issueDemoToken(deps: DemoDeps) {
  const key = deps.config.realtime.demoApiKey;
  if (!key) throw new AppError("unavailable", "demo_disabled", "The demo is disabled: set RT_DEMO_API_KEY to an API key for the demo to use.");
  const now = deps.now();
  const principal = await authenticateApiKey(deps.db, `Bearer ${key}`, now, deps.config.plans);
  const { token, expiresIn } = issueSessionToken(deps.config.auth.sessionTokenSecret, principal, now);
  return { token, expires_in: expiresIn, endpoint: REALTIME_PATH };
}

const DEMO_HTML = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Live transcription demo</title>
<style>
  body { font: 16px/1.5 system-ui, sans-serif; max-width: 48rem; margin: 2rem auto; padding: 0 1rem; color: #222; }
  button { font-size: 1rem; padding: .5rem 1.25rem; }
  #status { color: #666; margin: .75rem 0; }
  #speaking { display: inline-block; width: .8rem; height: .8rem; border-radius: 50%; background: #ccc; vertical-align: middle; }
  #speaking.on { background: #d33; }
  #transcripts { list-style: none; padding: 0; }
  #transcripts li { padding: .5rem 0; border-bottom: 1px solid #eee; }
  #transcripts li small { color: #888; margin-right: .5rem; }
  #transcripts li.failed { color: #a33; }
</style>
</head>
<body>
<h1>Live transcription</h1>
<p>Streams your microphone to <code>${REALTIME_PATH}</code> and shows transcripts as the server detects the end of each utterance.</p>
<button id="start">Start</button> <button id="stop" disabled>Stop</button>
<div id="status"><span id="speaking"></span> <span id="status-text">idle</span></div>
<ol id="transcripts"></ol>
<script>
(() => {
  const RATE = 48000;
  const $ = (id) => document.getElementById(id);
  let ws, ctx, stream, proc;
  const status = (t) => { $("status-text").textContent = t; };
  function addLine(text, startMs, cls) {
    const li = document.createElement("li");
    if (cls) li.className = cls;
    const small = document.createElement("small");
    small.textContent = (startMs / 1000).toFixed(1) + " s";
    li.append(small, document.createTextNode(text));
    $("transcripts").append(li);
  }
  // Resuming (docs/realtime-resume.md): the page keeps the session's
  // credential, the id of the last event it processed, and the last 30 s of microphone
  // audio; a connection lost without a close frame (1006), or closed 1012 by a gateway
  // that restarts, is reopened with a new token
  // and resumed, and the audio from the session's audio_ms on is sent again.
  const KEEP = 30 * RATE;
  let credential = null, lastEventId = null, live = false, stopping = false, retries = 0, captured = 0, kept = [];
  async function token() {
    const r = await fetch("/demo/session-token", { method: "POST" });
    const body = await r.json();
    if (!r.ok) throw new Error("token refused: " + (body.error && body.error.message));
    return body;
  }
  function connect(body) {
    const proto = location.protocol === "https:" ? "wss:" : "ws:";
    let q = "?sample_rate=" + RATE + "&access_token=" + encodeURIComponent(body.token);
    if (credential) q += "&resume=" + encodeURIComponent(credential) + (lastEventId ? "&last_event_id=" + encodeURIComponent(lastEventId) : "");
    ws = new WebSocket(proto + "//" + location.host + body.endpoint + q);
    ws.binaryType = "arraybuffer";
    ws.onmessage = (m) => {
      const e = JSON.parse(m.data);
      if (e.event_id) lastEventId = e.event_id;
      switch (e.type) {
        case "session.created": credential = e.resume ? e.resume.credential : null; live = true; status("listening (session " + e.session_id + ", " + e.plan + " plan)"); $("stop").disabled = false; break;
        case "session.resumed": {
          credential = e.resume.credential; retries = 0;
          const from = Math.round((e.audio_ms * RATE) / 1000);
          for (const k of kept) if (k.at + k.pcm.length > from) ws.send(k.pcm.slice(Math.max(0, from - k.at)).buffer);
          live = true; status("resumed (session " + e.session_id + ", " + e.replayed + " events caught up)"); break;
        }
        case "input_audio_buffer.speech_started": $("speaking").className = "on"; break;
        case "input_audio_buffer.speech_stopped": $("speaking").className = ""; break;
        case "conversation.item.input_audio_transcription.completed": if (e.transcript.trim()) addLine(e.transcript, e.audio_start_ms); break;
        case "conversation.item.input_audio_transcription.failed": addLine("(transcription failed: " + e.error.message + ")", 0, "failed"); break;
        case "error": status("error: " + e.error.message); break;
      }
    };
    ws.onclose = (e) => {
      live = false;
      if ((e.code === 1006 || e.code === 1012) && credential && !stopping && retries < 8) {
        const wait = Math.min(8000, 250 * 2 ** retries++);
        status("connection lost; resuming in " + (wait / 1000).toFixed(1) + " s…");
        setTimeout(() => token().then(connect, (err) => { status("error: " + err.message); cleanup(); }), wait);
        return;
      }
      status("closed " + e.code + (e.reason ? " " + e.reason : "")); cleanup();
    };
  }
  async function start() {
    $("start").disabled = true;
    credential = lastEventId = null; stopping = false; retries = 0; captured = 0; kept = [];
    status("getting a session token…");
    const body = await token();
    stream = await navigator.mediaDevices.getUserMedia({ audio: { channelCount: 1, echoCancellation: false, noiseSuppression: false, autoGainControl: false } });
    ctx = new AudioContext({ sampleRate: RATE });
    const src = ctx.createMediaStreamSource(stream);
    proc = ctx.createScriptProcessor(4096, 1, 1);
    proc.onaudioprocess = (ev) => {
      const f = ev.inputBuffer.getChannelData(0);
      const pcm = new Int16Array(f.length);
      for (let i = 0; i < f.length; i++) { const s = Math.max(-1, Math.min(1, f[i])); pcm[i] = s < 0 ? s * 0x8000 : s * 0x7fff; }
      kept.push({ at: captured, pcm });
      captured += pcm.length;
      while (kept.length && kept[0].at + kept[0].pcm.length < captured - KEEP) kept.shift();
      if (live && ws && ws.readyState === 1) ws.send(pcm.buffer);
    };
    src.connect(proc);
    proc.connect(ctx.destination);
    connect(body);
  }
  function cleanup() {
    if (proc) proc.disconnect();
    if (stream) stream.getTracks().forEach((t) => t.stop());
    if (ctx) ctx.close();
    proc = stream = ctx = undefined;
    live = false; kept = [];
    $("start").disabled = false; $("stop").disabled = true; $("speaking").className = "";
  }
  $("start").onclick = () => start().catch((e) => { status("error: " + e.message); cleanup(); });
  $("stop").onclick = () => { stopping = true; if (ws && ws.readyState === 1) ws.send(JSON.stringify({ type: "session.close" })); $("stop").disabled = true; };
})();
</script>
</body>
</html>
`;
