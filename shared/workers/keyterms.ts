/**
 * Keyterms: words and phrases a request names so that recognition favours them (Deepgram
 * and AssemblyAI's `keyterms`, OpenAI's `keywords`). Every engine gets them with the
 * prompt: PocketSphinx as a separate part of its prompt bytes (its keyterm words get a
 * pronunciation when the dictionary lacks them, ps-worker.c biased_search), whisper.cpp
 * and OpenAI-compatible upstreams appended to the prompt text (promptWithKeyterms).
 */

/** The byte between the prompt and the keyterms in ps-worker's prompt bytes. */
export const KEYTERM_SEPARATOR = "\u001f";

/** The prompt text an engine without keyterms of its own gets: the prompt, then the keyterms, comma-separated. */
export function promptWithKeyterms(prompt: string | undefined | null, keyterms: readonly string[] | undefined | null): string | undefined {
  const terms = (keyterms ?? []).join(", ");
  const text = [prompt?.trim(), terms].filter(Boolean).join(prompt?.trim() && !/[.!?]$/.test(prompt.trim()) ? ". " : " ");
  return text || undefined;
}

/** ps-worker's prompt bytes: the prompt (first 4000 characters), then KEYTERM_SEPARATOR and the keyterms, one a line. */
export function pocketsphinxPrompt(prompt: string | undefined | null, keyterms: readonly string[] | undefined | null): string {
  const head = (prompt ?? "").slice(0, 4000).replaceAll(KEYTERM_SEPARATOR, " ");
  return keyterms?.length ? `${head}${KEYTERM_SEPARATOR}${keyterms.join("\n")}` : head;
}
