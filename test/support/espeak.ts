import { execFile } from "node:child_process";
import { promisify } from "node:util";

const run = promisify(execFile);

/**
 * Speech synthesised with Debian's espeak-ng (a WAV, 22.05 kHz mono): test sentences that
 * carry numbers, currency, times, dates and questions, read in words, so the engine hears
 * them as a speaker would say them.
 */
export async function synthesise(text: string, options: { wordsPerMinute?: number; voice?: string } = {}): Promise<Uint8Array> {
  const { stdout } = await run("espeak-ng", ["-v", options.voice ?? "en-us+f2", "-s", String(options.wordsPerMinute ?? 150), "--stdout", text], { encoding: "buffer", maxBuffer: 64 * 1024 * 1024 });
  return new Uint8Array(stdout);
}

/** Sentences for the formatting tests and bench: what is said, and how it should read. */
export const FORMAT_SENTENCES: { spoken: string; formatted: string; prompt?: string }[] = [
  { spoken: "the meeting starts at three thirty p m on january fifth", formatted: "The meeting starts at 3:30 p.m. on January 5th." },
  { spoken: "prices went up twenty five percent last year", formatted: "Prices went up 25% last year." },
  { spoken: "the ticket costs three hundred dollars", formatted: "The ticket costs $300." },
  { spoken: "do you want to meet on monday", formatted: "Do you want to meet on Monday?" },
  { spoken: "i was born in nineteen ninety nine", formatted: "I was born in 1999." },
  { spoken: "she finished in twenty first place", formatted: "She finished in 21st place." },
  { spoken: "what is the population of new york", formatted: "What is the population of New York?", prompt: "New York" },
  { spoken: "we sold forty two cars in december", formatted: "We sold 42 cars in December." },
];

/** The two speech fixtures (../shared/fixtures/audio), as said and as they should read. */
export const FORMAT_FIXTURES: { file: string; spoken: string; formatted: string }[] = [
  {
    file: "jfk.wav",
    spoken: "and so my fellow americans ask not what your country can do for you ask what you can do for your country",
    formatted: "And so, my fellow Americans, ask not what your country can do for you, ask what you can do for your country.",
  },
  { file: "ldc93s1.wav", spoken: "she had your dark suit in greasy wash water all year", formatted: "She had your dark suit in greasy wash water all year." },
];
