/**
 * Interleaved PCM16 (frame after frame, one sample per channel in each) as one array per
 * channel: the decoders keep a multichannel upload's channels interleaved
 * (`decodeAudio({ channels })`, the batch fetch step's `audio.pcm`), and each channel is
 * transcribed on its own (docs/segment-reference.md "Multichannel").
 */
export function splitChannels(interleaved: Int16Array, count: number): Int16Array[] {
  if (count === 1) return [interleaved];
  return Array.from({ length: count }, (_, c) => pickChannel(interleaved, count, c));
}

/** Channel `channel` of `count` interleaved channels (a trailing partial frame is dropped). */
export function pickChannel(interleaved: Int16Array, count: number, channel: number): Int16Array {
  if (count === 1) return interleaved;
  const frames = Math.floor(interleaved.length / count);
  const out = new Int16Array(frames);
  for (let f = 0, i = channel; f < frames; f++, i += count) out[f] = interleaved[i]!;
  return out;
}
