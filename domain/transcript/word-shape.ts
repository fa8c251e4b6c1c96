/** Word-shape helpers the smart-format rules share. */

export type Keys = readonly string[];
/** Index access that reads past either end as "", which matches no rule. */
export const at = (k: Keys, i: number): string => k[i] ?? "";

/** Unformatted recogniser output: lowercase letters with inner apostrophes ("don't", "y'all"), nothing else. */
export const isRaw = (w: string): boolean => /^\p{Ll}+(?:'\p{Ll}+)*$/u.test(w);

/** Lowercase without surrounding punctuation, for comparing words regardless of formatting. */
export const bare = (w: string): string => w.replace(/^[^\p{L}\p{N}']+|[^\p{L}\p{N}']+$/gu, "");

export const capitalise = (w: string): string => w.charAt(0).toUpperCase() + w.slice(1);
