/** JSON.parse that answers undefined for text that is not JSON (a record to step over, not a crash). */
export function safeJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}
