import { concatPcm } from "./fixtures";
import { fixture, silence } from "./realtime-support";
import { telephone } from "./telephone";

/**
 * One person heard through two very different channels, then through the first again:
 * jfk.wav's 0–4 s through a telephone band (telephone.ts), 4–8 s as recorded, 8–11 s
 * through the telephone again, a second of silence after each (the realtime VAD makes
 * items of each). The live labels give the recorded voice a label of its own (from a run
 * of the second item); the third item joins the first speaker, whose Gaussian then covers
 * both channels closely enough to fold the second label into it
 * (`conversation.speaker.merged`; domain/diarization/online.test.ts labels items one by
 * one). Chosen because both doors cut and label it alike: the order microphone,
 * telephone, microphone folded on the native door but not through the OpenAI door's
 * 24 kHz, where the third item went to the telephone's label.
 */
export function oneVoiceTwoChannels(): Int16Array {
  const jfk = fixture("jfk.wav");
  const s = (from: number, to: number) => jfk.subarray(from * 16_000, to * 16_000);
  return concatPcm(telephone(s(0, 4)), silence(1), s(4, 8), silence(1), telephone(s(8, 11)), silence(1.5));
}
