import { describe, expect, it } from "vitest";
import { smartFormat, smartFormatText, type FormatWord } from "./smart-format";
import { termsFrom } from "./terms";

/** Words spoken back to back (250 ms each, 50 ms apart), with extra pauses (ms) before given indexes. */
function timed(text: string, pauses: Record<number, number> = {}): FormatWord[] {
  let t = 0;
  return text.split(" ").map((word, i) => {
    t += pauses[i] ?? 0;
    const w = { word, start_ms: t, end_ms: t + 250 };
    t += 300;
    return w;
  });
}

const f = smartFormatText;

describe("sentences", () => {
  it("ends a sentence at a long pause and at the end (JFK)", () => {
    const words = timed("and so my fellow americans ask not what your country can do for you", { 5: 900 });
    expect(smartFormat(words, { terms: ["Americans"] }).text).toBe(
      "And so my fellow Americans. Ask not what your country can do for you.",
    );
  });

  it("ignores pauses shorter than sentenceGapMs, and pauses without timings", () => {
    expect(smartFormat(timed("we went home then we slept", { 3: 600 })).text).toBe("We went home then we slept.");
    expect(smartFormat(timed("we went home then we slept", { 3: 600 }), { sentenceGapMs: 500 }).text).toBe(
      "We went home. Then we slept.",
    );
    const untimed = [{ word: "we" }, { word: "went", start_ms: 5000 }, { word: "home" }];
    expect(smartFormat(untimed).text).toBe("We went home.");
  });

  it("breaks at a pause of exactly sentenceGapMs, not one millisecond less, and only with both timings", () => {
    const words = (gap: number) => [
      { word: "it", start_ms: 0, end_ms: 200 },
      { word: "rained", start_ms: 300, end_ms: 600 },
      { word: "we", start_ms: 600 + gap, end_ms: 800 + gap },
      { word: "stayed", start_ms: 900 + gap, end_ms: 1100 + gap },
    ];
    expect(smartFormat(words(700)).text).toBe("It rained. We stayed.");
    expect(smartFormat(words(699)).text).toBe("It rained we stayed.");
    expect(smartFormat([{ word: "it", end_ms: 100 }, { word: "rained", start_ms: 5000 }]).text).toBe("It. Rained.");
    expect(smartFormat([{ word: "it", start_ms: 0 }, { word: "rained", start_ms: 5000, end_ms: 5200 }]).text).toBe("It rained.");
    expect(smartFormat([{ word: "it", start_ms: 0, end_ms: 100 }, { word: "rained", end_ms: 5200 }]).text).toBe("It rained.");
  });

  it("ends a sentence where the input does, unless the next word is still raw", () => {
    // "home." keeps its own form (it has punctuation); a capitalised next word opens a sentence, a raw one does not
    expect(smartFormat([{ word: "home." }, { word: "Then" }, { word: "slept" }]).text).toBe("home. Then slept.");
    expect(smartFormat([{ word: "home." }, { word: "then" }, { word: "slept" }]).text).toBe("home. then slept.");
    expect(smartFormat([{ word: "at" }, { word: "p.m." }, { word: "on" }, { word: "friday" }]).text).toBe("At p.m. on Friday.");
  });

  it("leaves the last sentence open when endsSentence is false", () => {
    expect(f("so we started", { endsSentence: false })).toBe("So we started");
    expect(smartFormat(timed("it rained we stayed", { 2: 1000 }), { endsSentence: false }).text).toBe(
      "It rained. We stayed",
    );
  });

  it("asks a question only when certain", () => {
    for (const q of ["do you know the way", "are you there", "is it raining", "can we go", "will they come", "did he call",
      "could i help", "should we leave", "have you eaten", "was it good", "is there more", "doesn't it hurt"]) {
      expect(f(q)).toMatch(/\?$/);
    }
    for (const q of ["what is your name", "where are we", "when does it start", "why did she go", "how can i help",
      "who was there", "which would you pick"]) {
      expect(f(q)).toMatch(/\?$/);
    }
  });

  it("does not ask statements, orders or wh-clauses", () => {
    for (const s of ["what you can do for your country", "when i was young", "how it works", "you are here",
      "do it now", "have it your way", "had i known", "can openers are handy", "where the river bends", "what's more"]) {
      expect(f(s)).toMatch(/\.$/);
    }
  });

  it("puts the sentence mark after the last non-empty form, and asks about a time", () => {
    expect(f("is it at three p m")).toBe("Is it at 3 p.m.?");
    expect(f("we meet at three p m")).toBe("We meet at 3 p.m.");
    const { words } = smartFormat(timed("it costs five dollars"));
    expect(words.map((w) => w.punctuated_word)).toEqual(["It", "costs", "$5.", ""]);
  });
});

describe("casing", () => {
  it("capitalises I and its contractions", () => {
    expect(f("so i think i'm right and i'll say i've known what i'd do")).toBe(
      "So I think I'm right and I'll say I've known what I'd do.",
    );
  });

  it("capitalises weekdays and unambiguous months, may/march only in dates", () => {
    expect(f("on sunday and monday in april and june")).toBe("On Sunday and Monday in April and June.");
    expect(f("you may march in may")).toBe("You may march in may.");
    expect(f("we march ten miles")).toBe("We march 10 miles.");
    expect(f("it is due may first")).toBe("It is due May 1st.");
    expect(f("on march third")).toBe("On March 3rd.");
  });

  it("applies terms case-insensitively, multi-word and longest first", () => {
    const terms = ["New York", "New York City", "JFK", "Metformin", "iPhone"];
    expect(f("we flew from jfk to new york city and new york", { terms })).toBe(
      "We flew from JFK to New York City and New York.",
    );
    expect(f("she takes metformin daily", { terms })).toBe("She takes Metformin daily.");
    expect(f("iphone sales", { terms })).toBe("iPhone sales.");
  });

  it("lets terms win over other rules but not over a lowercase term's sentence start", () => {
    expect(f("metformin helps may people", { terms: ["metformin", "may"] })).toBe("Metformin helps may people.");
    expect(f("the may first deadline", { terms: ["may"] })).toBe("The may first deadline.");
    expect(f("three mile island", { terms: ["Three Mile Island"] })).toBe("Three Mile Island.");
  });

  it("matches terms ignoring their punctuation but never across a sentence break", () => {
    expect(f("we met doctor smith", { terms: ["Doctor Smith,", "(JFK)"] })).toBe("We met Doctor Smith.");
    expect(smartFormat(timed("in new york", { 2: 1000 }), { terms: ["New York"] }).text).toBe("In new. York.");
  });
});

describe("numbers", () => {
  it("writes numbers of ten or more, or of several words, as digits", () => {
    expect(f("twenty five people")).toBe("25 people.");
    expect(f("in two thousand and twenty")).toBe("In 2020.");
    expect(f("one hundred and five dalmatians")).toBe("105 dalmatians.");
    expect(f("a hundred people and ten thousand cats")).toBe("100 people and 10,000 cats.");
    expect(f("twelve of them")).toBe("12 of them.");
    expect(f("three million two hundred thousand")).toBe("3,200,000.");
  });

  it("keeps single small numbers and lists of numbers as words", () => {
    expect(f("one of the two")).toBe("One of the two.");
    expect(f("call five five five")).toBe("Call five five five.");
    expect(f("twenty twenty")).toBe("Twenty twenty.");
    expect(f("hundred")).toBe("Hundred.");
  });

  it("formats percentages and decimals", () => {
    expect(f("twenty five percent")).toBe("25%.");
    expect(f("five percent")).toBe("5%.");
    expect(f("three point five percent")).toBe("3.5%.");
    expect(f("two point five")).toBe("2.5.");
    expect(f("zero point zero five")).toBe("0.05.");
    expect(f("at this point five people left")).toBe("At this point five people left.");
  });

  it("formats dollars, cents and euros, not pounds", () => {
    expect(f("three hundred dollars")).toBe("$300.");
    expect(f("three dollars and fifty cents")).toBe("$3.50.");
    expect(f("one dollar five cents")).toBe("$1.05.");
    expect(f("twenty euros")).toBe("€20.");
    expect(f("fifty cents")).toBe("50 cents.");
    expect(f("five pounds of flour")).toBe("Five pounds of flour.");
  });

  it("formats multi-word ordinals only", () => {
    expect(f("the twenty first century")).toBe("The 21st century.");
    expect(f("the one hundredth time")).toBe("The 100th time.");
    expect(f("the third man")).toBe("The third man.");
    expect(f("a twenty second pause")).toBe("A 20 second pause.");
  });

  it("formats times", () => {
    expect(f("at three thirty p m")).toBe("At 3:30 p.m.");
    expect(f("at twelve oh five a m")).toBe("At 12:05 a.m.");
    expect(f("at seven pm")).toBe("At 7 p.m.");
    expect(f("at three o'clock")).toBe("At 3 o'clock.");
    expect(f("at three a m")).toBe("At 3 a.m.");
    expect(f("at three a m p")).toBe("At 3 a.m. p.");
    expect(f("i saw a man")).toBe("I saw a man.");
    expect(f("three thirty")).toBe("Three thirty.");
  });

  it("formats dates", () => {
    expect(f("on january fifth")).toBe("On January 5th.");
    expect(f("on january fifth twenty twenty four")).toBe("On January 5th, 2024.");
    expect(f("on august twenty second two thousand twenty four")).toBe("On August 22nd, 2024.");
    expect(f("on july four nineteen ninety nine")).toBe("On July 4, 1999.");
    expect(f("in january twenty twenty four")).toBe("In January 2024.");
    expect(f("on the fifth of january")).toBe("On the 5th of January.");
    expect(f("the first of may")).toBe("The 1st of May.");
    expect(f("the third of march nineteen ninety nine")).toBe("The 3rd of March 1999.");
  });

  it("reads year pairs only after a cue word or in a date", () => {
    expect(f("in nineteen ninety nine")).toBe("In 1999.");
    expect(f("since twenty ten")).toBe("Since 2010.");
    expect(f("by twenty twenty four")).toBe("By 2024.");
    expect(f("the summer of nineteen oh five")).toBe("The summer of 1905.");
    expect(f("nineteen ninety nine")).toBe("Nineteen ninety nine.");
    expect(f("in twenty five minutes")).toBe("In 25 minutes.");
  });

  it("gives merged tokens an empty form and keeps every word and its fields", () => {
    const words = timed("it was three dollars and fifty cents").map((w, i) => ({ ...w, confidence: i / 10 }));
    const result = smartFormat(words);
    expect(result.text).toBe("It was $3.50.");
    expect(result.words).toHaveLength(words.length);
    expect(result.words.map((w) => w.punctuated_word)).toEqual(["It", "was", "$3.50.", "", "", "", ""]);
    result.words.forEach((w, i) => {
      const { punctuated_word, ...rest } = w;
      expect(rest).toEqual(words[i]);
    });
  });

  it("does not merge numbers across a sentence break", () => {
    expect(smartFormat(timed("twenty five", { 1: 1000 })).text).toBe("20. Five.");
  });
});

describe("formatted input", () => {
  it("leaves words with capitals, digits or punctuation alone", () => {
    const text = "Hello, world. It costs $5.";
    expect(f(text)).toBe(text);
    expect(f("It's 25% of $3.50 at 3:30 p.m. on January 5th, 2024.")).toBe(
      "It's 25% of $3.50 at 3:30 p.m. on January 5th, 2024.",
    );
    expect(f("Is it true?")).toBe("Is it true?");
    expect(f("Stop!")).toBe("Stop!");
  });

  it("is idempotent on its own output", () => {
    for (const raw of ["do you know what i'd pay on the fifth of may", "it was three dollars and fifty cents at three p m",
      "in nineteen ninety nine twenty five percent of people agreed", "y'all don't know"]) {
      const once = f(raw);
      expect(f(once)).toBe(once);
    }
  });

  it("keeps apostrophes", () => {
    expect(f("y'all don't know")).toBe("Y'all don't know.");
  });

  it("handles empty input", () => {
    expect(smartFormat([])).toEqual({ text: "", words: [] });
    expect(f("   ")).toBe("");
  });
});

describe("termsFrom", () => {
  it("collects metadata strings recursively, split on commas, semicolons and newlines", () => {
    const metadata = {
      title: "Board meeting",
      attendees: ["Ana García", { name: "JFK", tags: ["New York, Boston;Chicago\nMetformin"] }],
      count: 3,
      nested: { deep: { deeper: "Zoë" } },
      empty: "",
      missing: null,
    };
    expect(termsFrom(metadata)).toEqual([
      "Board meeting", "Ana García", "JFK", "New York, Boston;Chicago Metformin",
      "New York", "Boston", "Chicago", "Metformin", "Zoë",
    ]);
  });

  it("takes names from a prompt but not sentence-initial capitals", () => {
    expect(termsFrom(null, "The patient saw Dr. Smith at New York Presbyterian. He takes Metformin and 500mg of iPhone."))
      .toEqual(["Dr", "Smith", "New York Presbyterian", "Metformin", "500mg", "iPhone"]);
    expect(termsFrom(null, "New York is big")).toEqual(["New York", "York"]);
    expect(termsFrom(undefined, "Call JFK Airport, Paris or Rome")).toEqual(["JFK", "Call JFK Airport", "JFK Airport", "Paris", "Rome"]);
  });

  it("dedupes, drops long strings, caps the count and survives cycles", () => {
    const cyclic: Record<string, unknown> = { a: "Boston", b: "boston", long: "x".repeat(101) };
    cyclic.self = cyclic;
    expect(termsFrom(cyclic, "Boston")).toEqual(["Boston"]);
    const many = Array.from({ length: 600 }, (_, i) => `Term${i}`);
    expect(termsFrom(many)).toHaveLength(500);
    expect(termsFrom(undefined, null)).toEqual([]);
  });

  it("keeps a term of exactly 100 characters and the first 500 terms, normalising inner whitespace", () => {
    expect(termsFrom({ a: "y".repeat(100), b: "z".repeat(101), c: "  New \t  York  " })).toEqual(["y".repeat(100), "New York"]);
    const many = Array.from({ length: 600 }, (_, i) => `Term${i}`);
    const terms = termsFrom(many, "Boston");
    expect(terms[0]).toBe("Term0");
    expect(terms[499]).toBe("Term499");
    // the prompt's names come after the metadata's and the cap holds for them too
    expect(terms).not.toContain("Boston");
    expect(termsFrom(many.slice(0, 499), "Boston JFK")).toEqual([...many.slice(0, 499), "JFK"]);
  });

  it("reads metadata 32 levels deep and no deeper", () => {
    const nest = (depth: number, leaf: string): unknown => (depth === 0 ? leaf : { n: nest(depth - 1, leaf) });
    expect(termsFrom(nest(32, "Deep"))).toEqual(["Deep"]);
    expect(termsFrom(nest(33, "Deeper"))).toEqual([]);
  });

  it("splits a prompt on any whitespace, and a word with an inner capital or digit is a term even at a sentence start", () => {
    expect(termsFrom(null, "Visit\tParis\nand   Rome")).toEqual(["Visit Paris", "Paris", "Rome"]);
    expect(termsFrom(null, "IPhone sales. X5 launch")).toEqual(["IPhone", "X5"]);
    expect(termsFrom(null, "met Ana. Then left")).toEqual(["Ana"]);
  });

  it("feeds smartFormat", () => {
    const terms = termsFrom({ speakers: "Ana García, JFK" }, "Notes on Metformin");
    expect(f("ana garcía asked jfk about metformin", { terms })).toBe("Ana García asked JFK about Metformin.");
  });

  it("keyterms are terms as written, after metadata's and before the prompt's", () => {
    expect(termsFrom({ a: "Elinor" }, "Notes on Metformin", ["Dashwood", "iPhone", "elinor", "Norland Park"])).toEqual(["Elinor", "Dashwood", "iPhone", "Norland Park", "Metformin"]);
    expect(f("mr john dashwood bought an iphone", { terms: termsFrom(null, null, ["Dashwood", "iPhone"]) })).toBe("Mr john Dashwood bought an iPhone.");
  });
});
