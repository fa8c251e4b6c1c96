import { concatPcm } from "./fixtures";
import { fixture, silence } from "./realtime-support";
import { telephone } from "./telephone";

/**
 * One person heard through two very different channels, then through the first again:
 * jfk.wav's 0–4 s as recorded, 4–8 s through a telephone band (telephone.ts), 8–11 s as
 * recorded, a second of silence after each (the realtime VAD makes an item of each, the
 * telephone's possibly two). The live labels give the telephone item a label of its own;
 * the third item joins the first speaker, whose Gaussian then covers both channels
 * closely enough to fold the telephone's label into it (`conversation.speaker.merged`;
 * domain/diarization/online.test.ts labels the same items one by one).
 */
export function oneVoiceTwoChannels(): Int16Array {
  const jfk = fixture("jfk.wav");
  const s = (from: number, to: number) => jfk.subarray(from * 16_000, to * 16_000);
  return concatPcm(s(0, 4), silence(1), telephone(s(4, 8)), silence(1), s(8, 11), silence(1.5));
}
