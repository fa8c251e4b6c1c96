import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fixturePath } from "./fixtures";

/** Seconds ldc93s1 starts after jfk in the stereo call. */
export const STEREO_OFFSET_SECONDS = 2;

/**
 * A stereo "call" made with ffmpeg from two real recordings: jfk.wav (11 s) on channel 0
 * and ldc93s1.wav (2.9 s) on channel 1 starting STEREO_OFFSET_SECONDS in, padded with
 * silence to jfk's length: 16 kHz PCM16 WAV, 11 s, 2 channels (issue 29's acceptance).
 */
export function stereoCall(): Buffer {
  const dir = mkdtempSync(join(tmpdir(), "stt-stereo-"));
  try {
    const out = join(dir, "call.wav");
    const delay = STEREO_OFFSET_SECONDS * 1000;
    execFileSync("ffmpeg", [
      "-nostdin", "-hide_banner", "-loglevel", "error",
      "-i", fixturePath("jfk.wav"), "-i", fixturePath("ldc93s1.wav"),
      "-filter_complex", `[1:a]adelay=${delay},apad[r];[0:a][r]join=inputs=2:channel_layout=stereo[a]`,
      "-map", "[a]", "-ac", "2", "-ar", "16000", "-c:a", "pcm_s16le", "-y", out,
    ]);
    return readFileSync(out);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Words PocketSphinx hears reliably in each recording (its word error rate is 27–43 %: a few are asserted, not all). */
export const JFK_WORDS = ["americans", "country", "fellow"];
export const LDC_WORDS = ["she", "had", "dark", "suit", "greasy", "wash", "water", "year"];
