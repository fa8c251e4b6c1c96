import { describe, expect, it } from "vitest";
import { KEYTERM_SEPARATOR, pocketsphinxPrompt, promptWithKeyterms } from "./keyterms";

describe("keyterms to the engines", () => {
  it("reach engines with the prompt: appended to its text, or after a separator in ps-worker's prompt bytes", () => {
    expect(promptWithKeyterms("Chapter one", ["Dashwood", "prudently"])).toBe("Chapter one. Dashwood, prudently");
    expect(promptWithKeyterms("Chapter one.", ["Dashwood"])).toBe("Chapter one. Dashwood");
    expect(promptWithKeyterms(undefined, ["Dashwood"])).toBe("Dashwood");
    expect(promptWithKeyterms("Chapter one", [])).toBe("Chapter one");
    expect(promptWithKeyterms(null, null)).toBeUndefined();
    expect(pocketsphinxPrompt("p", ["New York", "Zorblax"])).toBe(`p${KEYTERM_SEPARATOR}New York\nZorblax`);
    expect(pocketsphinxPrompt(`a${KEYTERM_SEPARATOR}b`, undefined)).toBe("a b");
    expect(pocketsphinxPrompt("x".repeat(5000), ["T"])).toBe(`${"x".repeat(4000)}${KEYTERM_SEPARATOR}T`);
  });
});
