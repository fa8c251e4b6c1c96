/**
 * The playground's audio, as browser JavaScript (playground-page.ts puts it in the page):
 * where the PCM comes from (the microphone, or an uploaded file streamed at real time),
 * what was sent when (so a turn's latency can be read against the moment its audio left),
 * and how audio is sent again from `audio_ms` after a resume (docs/realtime-resume.md).
 *
 * `createSource(kind, { rate, channels, file, onFrame, onEnd })` resolves to
 * `{ channels, start(), resendFrom(frame), sentAt(ms), stop() }`:
 * - `onFrame(pcm)` gets Int16Array frames (interleaved when `channels` is 2), in order;
 * - a file ends with 1.5 s of silence (so the VAD ends its last turn), then `onEnd()`;
 * - `resendFrom(frame)` replays from that sample frame: the file from there, at real time
 *   again; the microphone, what it kept of the last 30 s;
 * - `sentAt(ms)` is `performance.now()` when the frame holding the audio at `ms` on the
 *   timeline was sent (null before anything was).
 *
 * Written as a String.raw template with no `${`: the text is the script, byte for byte.
 */
export const PLAYGROUND_AUDIO_JS = String.raw`
const KEEP_SECONDS = 30;
const FILE_TAIL_SECONDS = 1.5;
const PACE_MS = 50;

function toPcm16(channelData, channels) {
  const frames = channelData[0].length;
  const out = new Int16Array(frames * channels);
  for (let i = 0; i < frames; i++) {
    for (let c = 0; c < channels; c++) {
      const s = Math.max(-1, Math.min(1, channelData[c][i]));
      out[i * channels + c] = s < 0 ? s * 0x8000 : s * 0x7fff;
    }
  }
  return out;
}

/** An AudioBuffer's channels as "channels" Float32Arrays: stereo kept, or everything averaged to mono. */
function channelsOf(buffer, channels) {
  if (channels === 2 && buffer.numberOfChannels >= 2) return [buffer.getChannelData(0), buffer.getChannelData(1)];
  const mono = new Float32Array(buffer.length);
  for (let c = 0; c < buffer.numberOfChannels; c++) {
    const d = buffer.getChannelData(c);
    for (let i = 0; i < d.length; i++) mono[i] += d[i] / buffer.numberOfChannels;
  }
  return [mono];
}

async function createSource(kind, opts) {
  const rate = opts.rate;
  let sent = []; // { at: frame, t: performance.now() } per frame sent, the last 60 s
  function noteSent(at) {
    sent.push({ at, t: performance.now() });
    while (sent.length > 2 && sent[1].at < at - 60 * rate) sent.shift();
  }
  function sentAt(ms) {
    const frame = (ms * rate) / 1000;
    let hit = null;
    for (const s of sent) if (s.at <= frame) hit = s;
    return hit ? hit.t : null;
  }
  return kind === "file" ? fileSource(opts, rate, noteSent, sentAt) : micSource(opts, rate, noteSent, sentAt);
}

async function micSource(opts, rate, noteSent, sentAt) {
  const stream = await navigator.mediaDevices.getUserMedia({ audio: { channelCount: 1, echoCancellation: false, noiseSuppression: false, autoGainControl: false } });
  const ctx = new AudioContext({ sampleRate: rate });
  const node = ctx.createMediaStreamSource(stream);
  const proc = ctx.createScriptProcessor(4096, 1, 1);
  let captured = 0, kept = [], running = false;
  proc.onaudioprocess = (ev) => {
    const pcm = toPcm16([ev.inputBuffer.getChannelData(0)], 1);
    kept.push({ at: captured, pcm });
    captured += pcm.length;
    while (kept.length && kept[0].at + kept[0].pcm.length < captured - KEEP_SECONDS * rate) kept.shift();
    if (running && opts.onFrame(pcm)) noteSent(captured - pcm.length);
  };
  node.connect(proc);
  proc.connect(ctx.destination);
  return {
    channels: 1,
    start() { running = true; },
    pause() { running = false; },
    resendFrom(from) {
      for (const k of kept) if (k.at + k.pcm.length > from) {
        const part = k.pcm.slice(Math.max(0, from - k.at));
        if (opts.onFrame(part)) noteSent(Math.max(from, k.at));
      }
      running = true;
    },
    sentAt,
    stop() {
      running = false;
      proc.disconnect();
      stream.getTracks().forEach((t) => t.stop());
      ctx.close();
    },
  };
}

async function fileSource(opts, rate, noteSent, sentAt) {
  const ctx = new AudioContext({ sampleRate: rate });
  const decoded = await ctx.decodeAudioData(await opts.file.arrayBuffer());
  ctx.close();
  const channels = opts.channels === 2 && decoded.numberOfChannels >= 2 ? 2 : 1;
  const speech = toPcm16(channelsOf(decoded, channels), channels);
  const pcm = new Int16Array(speech.length + Math.round(FILE_TAIL_SECONDS * rate) * channels);
  pcm.set(speech);
  const total = pcm.length / channels;
  let pos = 0, from = 0, since = 0, timer = null, ended = false;
  function pace() {
    const due = Math.min(total, from + Math.floor(((performance.now() - since) * rate) / 1000));
    if (due > pos) {
      const frame = pcm.slice(pos * channels, due * channels);
      if (!opts.onFrame(frame)) return; // not connected: the same audio goes once it is
      noteSent(pos);
      pos = due;
    }
    if (pos >= total && !ended) { ended = true; opts.onEnd(); }
  }
  function run(at) {
    clearInterval(timer);
    pos = from = at; since = performance.now();
    timer = setInterval(pace, PACE_MS);
  }
  return {
    channels,
    seconds: speech.length / channels / rate,
    start() { run(0); },
    pause() { clearInterval(timer); },
    resendFrom(at) { ended = false; run(Math.min(at, total)); },
    sentAt,
    stop() { clearInterval(timer); },
  };
}
`;
