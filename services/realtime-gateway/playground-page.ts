import { OPENAI_REALTIME_PATH } from "../../schemas/openai-realtime";
import { REALTIME_PATH, VAD_TRAILING_MS } from "../../schemas/realtime";
import { REDACT_ENTITIES } from "../../schemas/redact";
import { PLAYGROUND_AUDIO_JS } from "./playground-audio";
import { PLAYGROUND_SESSION_JS } from "./playground-session";
import { PLAYGROUND_VIEW_JS } from "./playground-view";

/**
 * The playground page served at /demo and /playground (demo.ts): the controls, the
 * styles and the three scripts (audio sources, view, session) in one document, so the
 * page needs nothing but its own origin. The ids the tests drive (`#start`, `#stop`,
 * `#status-text`, `#transcripts li`, `#connection li`, …) are the page's contract with
 * test/realtime-demo.test.ts and test/realtime-playground.test.ts.
 */
const redactBoxes = REDACT_ENTITIES.map((e) => `<label><input type="checkbox" name="redact" value="${e}"> ${e}</label>`).join("\n      ");

export const PLAYGROUND_HTML = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Realtime transcription playground</title>
<style>
  body { font: 15px/1.45 system-ui, sans-serif; max-width: 60rem; margin: 1.5rem auto; padding: 0 1rem; color: #222; }
  h1 { font-size: 1.5rem; margin: 0 0 .25rem; }
  p.lead { color: #555; margin-top: 0; }
  fieldset { border: 1px solid #ddd; border-radius: 6px; margin: 0 0 .75rem; padding: .5rem .75rem; }
  legend { color: #555; font-size: .85rem; }
  #settings { display: grid; grid-template-columns: repeat(auto-fit, minmax(17rem, 1fr)); gap: 0 .75rem; }
  label { margin-right: .75rem; white-space: nowrap; }
  fieldset.native-only:has(input:disabled) { opacity: .5; }
  button { font-size: 1rem; padding: .45rem 1.2rem; margin-right: .5rem; }
  #status { color: #555; margin: .75rem 0; }
  #speaking { display: inline-block; width: .8rem; height: .8rem; border-radius: 50%; background: #ccc; vertical-align: middle; }
  #speaking.on { background: #d33; }
  #effective { color: #777; font-size: .85rem; }
  #live p { margin: .25rem 0; padding: .35rem .5rem; background: #f6f8fa; border-radius: 4px; }
  #live .interim { color: #999; }
  b { font-weight: 600; color: #fff; background: #5a6fd6; border-radius: 3px; padding: 0 .35rem; margin-right: .4rem; font-size: .8rem; }
  #transcripts { list-style: none; padding: 0; }
  #transcripts li { padding: .45rem 0; border-bottom: 1px solid #eee; }
  #transcripts li small { color: #888; margin-right: .5rem; }
  #transcripts li .timing { display: block; color: #888; font-size: .8rem; }
  #transcripts li.failed, #connection li.failed { color: #a33; }
  .speaker { margin-right: .4rem; }
  .columns { display: grid; grid-template-columns: 2fr 1fr; gap: 1rem; }
  table { border-collapse: collapse; font-size: .85rem; width: 100%; }
  caption { text-align: left; color: #777; font-size: .8rem; padding-bottom: .3rem; }
  th, td { text-align: left; padding: .2rem .4rem; border-bottom: 1px solid #eee; }
  #connection { font: .8rem/1.4 ui-monospace, monospace; padding-left: 1rem; color: #555; }
  #connection li.lost { color: #b60; }
  #connection li.resumed { color: #287; }
</style>
</head>
<body>
<h1>Realtime transcription playground</h1>
<p class="lead">Streams your microphone or an audio file to <code>${REALTIME_PATH}</code> or, in OpenAI's protocol,
to <code>${OPENAI_REALTIME_PATH}</code>, and shows what comes back: partials while you speak, the final of each turn
with its timing, and the connection resuming if it drops. The page gets a short-lived credential from its own
backend; it never sees an API key.</p>
<div id="settings">
  <fieldset>
    <legend>Door</legend>
    <label><input type="radio" name="door" value="native" id="door-native" checked> native</label>
    <label><input type="radio" name="door" value="openai" id="door-openai"> OpenAI Realtime</label>
  </fieldset>
  <fieldset>
    <legend>Audio</legend>
    <label><input type="radio" name="source" value="mic" id="source-mic" checked> microphone</label>
    <label><input type="radio" name="source" value="file" id="source-file"> file</label>
    <input type="file" id="file" accept="audio/*">
  </fieldset>
  <fieldset>
    <legend>Turn detection</legend>
    <select id="turn"><option value="server_vad">server_vad (silence)</option><option value="semantic_vad">semantic_vad (words and pitch)</option></select>
    <label>eagerness <select id="eagerness"><option>auto</option><option>low</option><option>medium</option><option>high</option></select></label>
  </fieldset>
  <fieldset>
    <legend>Speakers</legend>
    <label><input type="checkbox" id="diarize"> speaker labels (diarize)</label>
  </fieldset>
  <fieldset class="native-only">
    <legend>Transcript (native door)</legend>
    <label><input type="checkbox" id="smart-format" checked> smart format</label>
    <label><input type="checkbox" id="interims"> interims</label>
    <label><input type="checkbox" id="multichannel"> each channel of a stereo file</label>
  </fieldset>
  <fieldset class="native-only">
    <legend>Redact (native door)</legend>
      ${redactBoxes}
  </fieldset>
</div>
<button id="start">Start</button><button id="stop" disabled>Stop</button>
<div id="status"><span id="speaking"></span> <span id="status-text">idle</span> <span id="effective"></span></div>
<div class="columns">
  <section>
    <ol id="transcripts"></ol>
    <div id="live"></div>
  </section>
  <aside>
    <table id="latency"><caption>Latency per turn detection setting (medians): <i>turn ended</i> is speech_stopped after the end of the speech was sent, <i>final</i> the transcript after speech_stopped</caption>
      <thead><tr><th>setting</th><th>turns</th><th>turn ended</th><th>final</th></tr></thead><tbody></tbody></table>
    <ol id="connection"></ol>
  </aside>
</div>
<script>
(() => {
const VAD_TRAILING_MS = ${VAD_TRAILING_MS};
${PLAYGROUND_AUDIO_JS}
${PLAYGROUND_VIEW_JS}
${PLAYGROUND_SESSION_JS}
})();
</script>
</body>
</html>
`;
