/*
 * ps-worker: a persistent PocketSphinx decoder for the embedded transcription worker.
 *
 * The acoustic model, dictionary and language model are loaded once at start; the
 * process then serves requests on stdin until EOF, one at a time:
 *
 *   request  (binary, little-endian):
 *     uint32 magic 0x31535350 ("PSS1")
 *     uint32 n_samples       16 kHz mono signed 16-bit samples that follow
 *     uint32 prompt_bytes    UTF-8 prompt (biases recognition, see biased_search); may be 0;
 *                            keyterms follow a 0x1f byte
 *     prompt bytes, then n_samples * 2 bytes of PCM
 *   response (text): one JSON line
 *     {"segments":[{"words":[{"w":"..","s":..,"e":..,"p":..}]}],"promptWords":n}
 *     or {"error":"..."}
 *
 * Requests are independent: the live CMN estimate is seeded from each clip.
 *
 * Streaming requests (the realtime plane's incremental decoding, services/vad/
 * stream-decoders.ts): magic 0x32535350 ("PSS2"), uint32 op, uint32 payload_bytes, payload.
 *   op 1 START  payload: uint32 n_cmn, n_cmn float32 (CMN estimate to start from; 0 =
 *               the start-up one), then the UTF-8 prompt (keyterms after a 0x1f byte, as
 *               for a clip). No response.
 *   op 2 AUDIO  payload: PCM16LE samples, decoded now (ps_process_raw). No response.
 *   op 3 HYP    response {"hyp":"running hypothesis","frames":n,"words":[["word",end],..],"eos":x}:
 *               the first pass's running hypothesis, the frames decoded so far and each
 *               word's end frame (frames count voiced audio only); "eos" (absent with no
 *               words, or a last word the language model lacks) is log10 P(</s> | the
 *               last two words): how likely the sentence ends there (end_of_sentence)
 *   op 4 END    response {"segments":[{"words":[..]}],"cmn":[..]}: the utterance's words
 *               (times from the utterance start) and the CMN estimate it ended with, for
 *               the same speaker's next utterance.
 * One utterance is open at a time; its audio is never split by PocketSphinx's VAD (the
 * server VAD already cut it). The VAD runs these processes with -fwdflat no, so END
 * costs tens of milliseconds (the flat-lexicon pass is what makes END slow).
 *
 * Alignment requests (the embedded reviewer's acoustic check, services/jobs/
 * review-acoustic.ts): magic 0x33535350 ("PSS3"), uint32 n_samples, uint32 text_bytes,
 * the text, then n_samples of PCM (a whole slice). The text is lines of
 *   word <word> <PHONE> ...               a pronunciation for a word the dictionary lacks
 *   align <from_sample> <to_sample> <word> ...   force-align these words to that range
 * and the response one JSON line, one entry per align line in order:
 *   {"alignments":[{"ascr":..,"frames":n,"words":[["word",start_frame,end_frame],..]} | null,..]}
 * `ascr` is the path's acoustic score (the decoder's scaled log units, base 1.0001); null means the words could
 * not be aligned (a word without pronunciation, or the path did not survive the beam).
 * A second decoder with no language model does this (created on the first such
 * request), so words added here never reach the transcription decoder. CMN is seeded
 * from the whole slice, as for a transcription request.
 *
 * The first line written after start-up is {"ready":true,...}.
 *
 * Usage: ps-worker [model-dir [-option value ...]]: extra PocketSphinx options override
 * the built-in ones. ps-worker model-dir --align-only: alignment requests only (the
 * reviewer's process), no language model loaded.
 *
 * Utterances are split with PocketSphinx's own voice-activity detector, exactly as
 * pocketsphinx_continuous does; word frames are counted from the start of the
 * stream, so times are seconds from the start of the clip (frame rate -frate, 100/s).
 *
 * Prompt: see biased_search (per-request language-model biasing).
 */
#include <pocketsphinx.h>
#include <sphinxbase/ngram_model.h>
#include <sphinxbase/err.h>
#include <sphinxbase/ckd_alloc.h>
#include <sphinxbase/feat.h>
#include <sphinxbase/cmn.h>
#include <sphinxbase/fe.h>
#include <flite/flite.h>
#include <ctype.h>
#include <math.h>
#include <unistd.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* flite's CMU lexicon with letter-to-sound rules (libflite_cmulex, flite1-dev). */
cst_lexicon *cmu_lex_init(void);

#define MAGIC 0x31535350u
#define MAGIC_STREAM 0x32535350u
#define MAGIC_ALIGN 0x33535350u
enum { OP_START = 1, OP_AUDIO = 2, OP_HYP = 3, OP_END = 4 };
#define CHUNK 2048

static int read_full(void *buf, size_t n) {
  size_t got = 0;
  while (got < n) {
    size_t r = fread((char *)buf + got, 1, n - got, stdin);
    if (r == 0) return -1;
    got += r;
  }
  return 0;
}

static void json_string(FILE *out, const char *s) {
  fputc('"', out);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') { fputc('\\', out); fputc(c, out); }
    else if (c < 0x20) fprintf(out, "\\u%04x", c);
    else fputc(c, out);
  }
  fputc('"', out);
}

/* Skips <s>, </s>, <sil> and fillers like [NOISE] or ++GARBAGE++. */
static int is_filler(const char *w) {
  size_t n = strlen(w);
  if (n == 0) return 1;
  if (w[0] == '<' || w[0] == '[' || (n > 1 && w[0] == '+' && w[1] == '+')) return 1;
  return 0;
}

/* Copies a word without its alternate-pronunciation suffix "(2)". */
static void base_word(const char *w, char *out, size_t cap) {
  size_t n = strlen(w);
  if (n >= cap) n = cap - 1;
  memcpy(out, w, n);
  out[n] = 0;
  char *paren = strchr(out, '(');
  if (paren && paren != out) *paren = 0;
}

static int first_segment;
static double kept_seconds(int k, int frate);

/* How far the streamed utterance's segments count past the frames kept: the last frame
 * they reach, against the frames searched (kept_seconds' comment). A running hypothesis
 * may end before the frame searched last, which only makes its words look later. */
static int kept_offset(ps_decoder_t *ps) {
  int last = -1;
  for (ps_seg_t *s = ps_seg_iter(ps); s != NULL; s = ps_seg_next(s)) {
    int sf, ef;
    ps_seg_frames(s, &sf, &ef);
    if (ef > last) last = ef;
  }
  int offset = last + 1 - ps_get_n_frames(ps);
  return offset > 0 ? offset : 0;
}

/* An utterance's words as ps-worker reports them: seconds from the utterance start. */
struct timed_word { char w[256]; double start, end, p; };
struct word_list { struct timed_word *at; size_t n, cap; };

/* The decoder's words now (the running hypothesis mid-utterance, the final one after
 * ps_end_utt). `streamed`: the streamed utterance, whose words are placed by kept_seconds. */
static void collect_words(ps_decoder_t *ps, int frate, int streamed, struct word_list *out) {
  out->n = 0;
  int offset = streamed ? kept_offset(ps) : 0;
  logmath_t *lmath = ps_get_logmath(ps);
  for (ps_seg_t *it = ps_seg_iter(ps); it != NULL; it = ps_seg_next(it)) {
    const char *w = ps_seg_word(it);
    if (is_filler(w)) continue;
    int sf, ef;
    ps_seg_frames(it, &sf, &ef);
    int32 ascr, lscr, lback;
    double p = logmath_exp(lmath, ps_seg_prob(it, &ascr, &lscr, &lback));
    if (!(p >= 0.0)) p = 0.0;
    if (p > 1.0) p = 1.0;
    if (out->n == out->cap) {
      out->cap = out->cap ? 2 * out->cap : 64;
      out->at = realloc(out->at, out->cap * sizeof *out->at);
    }
    struct timed_word *t = &out->at[out->n++];
    base_word(w, t->w, sizeof t->w);
    t->start = streamed ? kept_seconds(sf - offset, frate) : (double)sf / frate;
    t->end = streamed ? kept_seconds(ef - offset, frate) + 1.0 / frate : (double)(ef + 1) / frate;
    t->p = p;
  }
}

/* One segment of the "segments" array: the words, if any ("p" absent where unknown). */
static void print_words(const struct word_list *words) {
  if (words->n == 0) return;
  printf("%s{\"words\":[", first_segment ? "" : ",");
  first_segment = 0;
  for (size_t i = 0; i < words->n; i++) {
    const struct timed_word *t = &words->at[i];
    printf("%s{\"w\":", i ? "," : "");
    json_string(stdout, t->w);
    printf(",\"s\":%.2f,\"e\":%.2f", t->start, t->end);
    if (t->p >= 0) printf(",\"p\":%.3f", t->p);
    printf("}");
  }
  printf("]}");
}

/*
 * Ends the open utterance and reports its words. The final pass (bestpath over the
 * first pass's lattice) now and then finds no path at all and leaves no hypothesis,
 * though the first pass had one: 9 of 135 streamed items of bench/diarization.ts's
 * three-speaker conversations came back without words (one of them, 13.31 s: 26 words
 * running, none final; its first 13.0 s ended with 26), and 14 of jfk.wav's 100 prefixes
 * cut every 0.1 s (services/vad/stream-decoders.test.ts). Then the first
 * pass's words, read just before the end, are the utterance's words, without a
 * probability (the first pass gives none: its segments all say 1).
 */
static void end_utterance(ps_decoder_t *ps, int frate, int streamed) {
  static struct word_list running, final;
  collect_words(ps, frate, streamed, &running);
  ps_end_utt(ps);
  collect_words(ps, frate, streamed, &final);
  if (final.n == 0)
    for (size_t i = 0; i < running.n; i++) running.at[i].p = -1;
  print_words(final.n ? &final : &running);
}

/*
 * Prompt biasing: the prompt's words that the pronunciation dictionary knows become a
 * small unigram language model, interpolated with the general one (weight
 * PROMPT_WEIGHT) in a search of its own ("prompt"); the default search is restored
 * after each request, so one request's prompt never affects another's. Building the
 * biased search costs about 0.3 CPU-s (the interpolated vocabulary and its lexicon
 * tree), more than decoding a 3 s utterance, so the last prompt's search is kept
 * (use_prompt): a realtime session sends the same prompt with every utterance.
 *
 * Keyterms: the prompt bytes may hold a unit separator (0x1f); the words after it are
 * the request's keyterms. They come first in the biased model, and a keyterm word the
 * dictionary lacks gets a pronunciation (keyterm_pronounce: flite's CMU lexicon, else
 * its letter-to-sound rules) and is added with ps_add_word instead of being dropped.
 * ps_add_word also gives the word a unigram in the general model at the probability of
 * its rarest words (1/N, sphinxbase's add_ug); the default search's lexicon tree is not
 * rebuilt (update FALSE), so the default search never produces it. At most
 * MAX_KEYTERM_WORDS are added per process.
 */
#define PROMPT_WEIGHT 0.15f
#define MAX_PROMPT_WORDS 512
#define MAX_KEYTERM_WORDS 20000
static int keyterm_words_added;

/* ARPAbet phones (the en-us acoustic model's set) for a lower-case word: flite's CMU
 * lexicon when it has the word, else its CMU letter-to-sound rules. Flite's phones are
 * the CMU set with stress digits and "ax" (schwa), which en-us spells AH. */
static int keyterm_pronounce(const char *word, char *out, size_t cap) {
  static cst_lexicon *lex;
  size_t n = strlen(word);
  if (n < 2 || n > 40) return 0;
  for (const char *c = word; *c; c++) if (!(*c >= 'a' && *c <= 'z') && *c != '\'') return 0;
  if (lex == NULL) lex = cmu_lex_init();
  cst_val *phones = lex_lookup(lex, word, NULL, NULL);
  size_t used = 0;
  out[0] = 0;
  for (const cst_val *v = phones; v; v = val_cdr(v)) {
    char ph[8];
    snprintf(ph, sizeof ph, "%s", val_string(val_car(v)));
    size_t k = 0;
    for (char *c = ph; *c; c++) if (!isdigit((unsigned char)*c)) ph[k++] = (char)toupper((unsigned char)*c);
    ph[k] = 0;
    if (!k || !strcmp(ph, "PAU")) continue;
    const char *arpa = !strcmp(ph, "AX") ? "AH" : !strcmp(ph, "AXR") ? "ER" : ph;
    int w = snprintf(out + used, cap - used, "%s%s", used ? " " : "", arpa);
    if (w < 0 || (size_t)w >= cap - used) { used = 0; break; }
    used += (size_t)w;
  }
  delete_val(phones);
  return used > 0;
}

/* Adds the words of one part of the prompt to words[]; keyterm words the dictionary
 * lacks are given a pronunciation first. */
static int prompt_words(ps_decoder_t *ps, char *part, int keyterms, char **words, int n) {
  char *save = NULL;
  const char *sep = " \t\r\n,.;:!?\"()[]{}";
  for (char *tok = strtok_r(part, sep, &save); tok && n < MAX_PROMPT_WORDS; tok = strtok_r(NULL, sep, &save)) {
    for (char *c = tok; *c; c++) *c = (char)tolower((unsigned char)*c);
    if (!strcmp(tok, "<s>") || !strcmp(tok, "</s>")) continue;
    char *phones = ps_lookup_word(ps, tok);
    if (phones == NULL && keyterms && keyterm_words_added < MAX_KEYTERM_WORDS) {
      char pron[512];
      if (keyterm_pronounce(tok, pron, sizeof pron) && ps_add_word(ps, tok, pron, FALSE) >= 0) keyterm_words_added++;
      phones = ps_lookup_word(ps, tok);
    }
    if (phones == NULL) continue;
    ckd_free(phones);
    int dup = 0;
    for (int i = 0; i < n; i++) if (!strcmp(words[i], tok)) dup = 1;
    if (!dup) words[n++] = tok;
  }
  return n;
}

static int biased_search(ps_decoder_t *ps, cmd_ln_t *config, const char *default_search, char *prompt) {
  ngram_model_t *base = ps_get_lm(ps, default_search);
  if (base == NULL) return 0;
  char *words[MAX_PROMPT_WORDS];
  char *keyterms = strchr(prompt, 0x1f);
  if (keyterms) *keyterms++ = 0;
  int n = keyterms ? prompt_words(ps, keyterms, 1, words, 0) : 0;
  n = prompt_words(ps, prompt, 0, words, n);
  if (n == 0) return 0;
  char path[] = "/tmp/ps-prompt-XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) return 0;
  FILE *f = fdopen(fd, "w");
  double lp = log10(1.0 / (n + 1));
  fprintf(f, "\\data\\\nngram 1=%d\n\n\\1-grams:\n-99.0 <s> 0.0\n%.4f </s> 0.0\n", n + 2, lp);
  for (int i = 0; i < n; i++) fprintf(f, "%.4f %s 0.0\n", lp, words[i]);
  fprintf(f, "\n\\end\\\n");
  fclose(f);
  ngram_model_t *plm = ngram_model_read(config, path, NGRAM_ARPA, ps_get_logmath(ps));
  unlink(path);
  if (plm == NULL) return 0;
  ngram_model_t *models[2] = { ngram_model_retain(base), plm };
  char *names[2] = { "general", "prompt" };
  float32 weights[2] = { 1.0f - PROMPT_WEIGHT, PROMPT_WEIGHT };
  ngram_model_t *set = ngram_model_set_init(config, models, names, weights, 2);
  if (set == NULL) return 0;
  int ok = ps_set_lm(ps, "prompt", set) >= 0;
  ngram_model_free(set); /* the search holds its own reference */
  if (!ok || ps_set_search(ps, "prompt") < 0) {
    ps_set_search(ps, default_search);
    return 0;
  }
  return n;
}

/* The prompt the kept "prompt" search was built from, and how many of its words it knows
 * (0: none, so requests with it decode with the default search). One is kept: memory
 * stays bounded, and a process mostly serves one session's prompt at a time. */
static char *kept_prompt;
static int kept_words;

/* Switches to the biased search for this prompt, built only when the prompt differs
 * from the kept one; returns the prompt words it knows (0: the default search stays). */
static int use_prompt(ps_decoder_t *ps, cmd_ln_t *config, const char *default_search, char *prompt) {
  if (kept_prompt && !strcmp(kept_prompt, prompt))
    return kept_words > 0 && ps_set_search(ps, "prompt") >= 0 ? kept_words : 0;
  free(kept_prompt);
  kept_prompt = strdup(prompt);
  ps_unset_search(ps, "prompt");
  kept_words = biased_search(ps, config, default_search, prompt);
  return kept_words;
}

/*
 * Mean cepstrum of the clip's voiced frames, computed with a second front end (cheap
 * next to decoding). Live CMN would otherwise start from a fixed guess, or from
 * whatever the previous request left behind; seeding it with the clip's own mean
 * makes each request independent of the ones before it and decodes the first words
 * as well as the last.
 */
static int clip_cmn_mean(fe_t *fe, const int16_t *pcm, size_t n, mfcc_t *mean, int ncep) {
  enum { BATCH = 256 };
  static mfcc_t **cep;
  if (cep == NULL) cep = (mfcc_t **)ckd_calloc_2d(BATCH, fe_get_output_size(fe), sizeof(mfcc_t));
  double sum[64] = {0};
  long frames = 0;
  fe_start_stream(fe);
  fe_start_utt(fe);
  const int16 *p = pcm;
  size_t left = n;
  while (left > 0) {
    int32 nframes = BATCH;
    fe_process_frames(fe, &p, &left, cep, &nframes, NULL);
    for (int f = 0; f < nframes; f++, frames++)
      for (int i = 0; i < ncep && i < 64; i++) sum[i] += cep[f][i];
    if (nframes == 0 && left > 0) break;
  }
  int32 last = 0;
  fe_end_utt(fe, cep[0], &last);
  for (int f = 0; f < last; f++, frames++)
    for (int i = 0; i < ncep && i < 64; i++) sum[i] += cep[0][i];
  if (frames < 10) return 0;
  for (int i = 0; i < ncep; i++) mean[i] = (mfcc_t)(sum[i] / frames);
  return 1;
}

/* Audio goes to the decoder in pieces of exactly FEED_SAMPLES (20 ms); what is left over
 * waits for the next AUDIO (or END). With its silence removal on, ps_process_raw's output
 * depends on how the audio is chunked: jfk.wav fed in pieces of 250 samples, or 5,000,
 * decodes to nothing, and to the same words as 20 ms pieces fed 161, 320 or 800 at a
 * time. The commit path feeds CHUNK-sample blocks of a whole clip; the stream gets
 * whatever sizes its JetStream messages had, so it is cut to a fixed grain here. */
#define FEED_SAMPLES 320
static int16_t feed_rest[FEED_SAMPLES];
static size_t feed_rest_n;

/* Where the streamed utterance's words lie in its audio. With silence removal on, the
 * decoder searches only the frames its voice detector keeps, and a word's frames are
 * counted among those, plus the stream position of the utterance's latest return to
 * speech: one utterance that holds pauses got times seconds late (jfk.wav's first 4.7 s
 * put "And" at 3.48 s instead of 0.3 s, "not" at 6.49 s, past its end). (The commit path
 * ends an utterance at every pause, and its times are right.) So every 20 ms piece fed
 * records how many frames had been kept after it (`fed_marks`); at the end the offset is
 * what the last frame searched was counted as, minus the frames kept, and a word's kept
 * frame is placed in the audio of the piece that kept it (`kept_seconds`). */
static struct fed_mark { int kept; long samples; } *fed_marks;
static size_t fed_marks_n, fed_marks_cap;
static long fed_samples;

static void process_piece(ps_decoder_t *ps, const int16_t *pcm, size_t n) {
  ps_process_raw(ps, pcm, n, FALSE, FALSE);
  fed_samples += (long)n;
  if (fed_marks_n == fed_marks_cap) {
    fed_marks_cap = fed_marks_cap ? 2 * fed_marks_cap : 1024;
    fed_marks = realloc(fed_marks, fed_marks_cap * sizeof *fed_marks);
  }
  fed_marks[fed_marks_n++] = (struct fed_mark){ ps_get_n_frames(ps), fed_samples };
}

/* Seconds from the utterance's first sample to the start of kept frame k: counted back
 * at frate from the end of the piece that kept it, never before that piece's start. */
static double kept_seconds(int k, int frate) {
  for (size_t i = 0; i < fed_marks_n; i++) {
    if (fed_marks[i].kept <= k) continue;
    double end = fed_marks[i].samples / 16000.0;
    double start = i ? fed_marks[i - 1].samples / 16000.0 : 0;
    double t = end - (double)(fed_marks[i].kept - k) / frate;
    return t > start ? t : start;
  }
  return fed_samples / 16000.0;
}

static void feed_raw(ps_decoder_t *ps, const int16_t *pcm, size_t n) {
  if (feed_rest_n) {
    size_t take = FEED_SAMPLES - feed_rest_n < n ? FEED_SAMPLES - feed_rest_n : n;
    memcpy(feed_rest + feed_rest_n, pcm, take * 2);
    feed_rest_n += take, pcm += take, n -= take;
    if (feed_rest_n < FEED_SAMPLES) return;
    process_piece(ps, feed_rest, FEED_SAMPLES);
    feed_rest_n = 0;
  }
  for (; n >= FEED_SAMPLES; pcm += FEED_SAMPLES, n -= FEED_SAMPLES) process_piece(ps, pcm, FEED_SAMPLES);
  memcpy(feed_rest, pcm, n * 2);
  feed_rest_n = n;
}
/* The last piece, shorter than FEED_SAMPLES, at the end of the utterance. */
static void feed_flush(ps_decoder_t *ps) {
  if (feed_rest_n) process_piece(ps, feed_rest, feed_rest_n);
  feed_rest_n = 0;
}

/*
 * End of sentence: log10 P(</s> | w1 w2) from the general language model (the raw
 * probability, without the language weight or insertion penalty the search applies),
 * for the realtime plane's semantic end of turn. "... for them" ends sentences often
 * (about -0.5 on en-us), "... and the" almost never (about -2.1). A word the model does
 * not know shortens the history (it backs off).
 */
static double end_of_sentence(ps_decoder_t *ps, const char *default_search, const char *w1, const char *w2, int *ok) {
  ngram_model_t *lm = ps_get_lm(ps, default_search);
  *ok = 0;
  if (lm == NULL) return 0;
  int32 end = ngram_wid(lm, "</s>");
  if (end == NGRAM_INVALID_WID) return 0;
  int32 unk = ngram_unknown_wid(lm);
  int32 hist[2] = { ngram_wid(lm, w2), ngram_wid(lm, w1) };
  int n = 2;
  if (hist[0] == NGRAM_INVALID_WID || hist[0] == unk) n = 0;
  else if (hist[1] == NGRAM_INVALID_WID || hist[1] == unk) n = 1;
  if (n == 0) return 0;
  int32 used;
  int32 p = ngram_ng_prob(lm, end, hist, n, &used);
  *ok = 1;
  return logmath_log_to_log10(ps_get_logmath(ps), p);
}

static char *sbuf;
static size_t scap;
static int stream_open, stream_biased;
/* Warm-up: without a carried CMN estimate the utterance's first WARM_SAMPLES are held
 * back and their own cepstral mean seeds live CMN (as clip_cmn_mean does for a whole
 * clip); decoding from the start-up estimate instead costs a large share of the words. */
#define WARM_SAMPLES 12800
static int16_t *warm;
static size_t warm_n;
static int warming;

static void warm_flush(ps_decoder_t *ps, fe_t *mean_fe, feat_t *feat, mfcc_t *cmn_init_vec, mfcc_t *cmn_vec, int ncep) {
  if (!warming) return;
  warming = 0;
  cmn_live_set(feat->cmn_struct, clip_cmn_mean(mean_fe, warm, warm_n, cmn_vec, ncep) ? cmn_vec : cmn_init_vec);
  feed_raw(ps, warm, warm_n);
  warm_n = 0;
}

/* One streaming request (see the header comment). Returns -1 on EOF or bad framing. */
static int stream_request(ps_decoder_t *ps, cmd_ln_t *config, const char *default_search, feat_t *feat, fe_t *mean_fe,
                          mfcc_t *cmn_init_vec, mfcc_t *cmn_vec, int ncep, int frate, uint32_t op, uint32_t len) {
  if (len > 64u * 1024 * 1024) { printf("{\"error\":\"request too large\"}\n"); fflush(stdout); return -1; }
  if (len + 1 > scap) { scap = len + 1; sbuf = realloc(sbuf, scap); }
  if (len && read_full(sbuf, len) < 0) return -1;
  sbuf[len] = 0;
  switch (op) {
    case OP_START: {
      if (stream_open) ps_end_utt(ps);
      if (stream_biased) { ps_set_search(ps, default_search); stream_biased = 0; }
      uint32_t ncmn = 0;
      if (len >= 4) memcpy(&ncmn, sbuf, 4);
      size_t cmn_bytes = (size_t)ncmn * 4;
      if (4 + cmn_bytes > len) ncmn = 0, cmn_bytes = len >= 4 ? len - 4 : 0;
      if (ncmn == (uint32_t)ncep) {
        mfcc_t v[64];
        for (int i = 0; i < ncep && i < 64; i++) { float f; memcpy(&f, sbuf + 4 + i * 4, 4); v[i] = (mfcc_t)f; }
        cmn_live_set(feat->cmn_struct, v);
        warming = 0;
      } else {
        warming = 1;
        warm_n = 0;
      }
      char *prompt = sbuf + (len >= 4 ? 4 + cmn_bytes : len);
      if (*prompt) stream_biased = use_prompt(ps, config, default_search, prompt) > 0;
      ps_start_stream(ps);
      ps_start_utt(ps);
      feed_rest_n = 0;
      fed_marks_n = 0;
      fed_samples = 0;
      stream_open = 1;
      return 0;
    }
    case OP_AUDIO:
      if (!stream_open || len < 2) return 0;
      const int16_t *pcm = (const int16_t *)sbuf;
      size_t n = len / 2;
      if (warming) {
        /* exactly WARM_SAMPLES, however the audio was chunked: the estimate (and so the
         * words) must not depend on message sizes */
        if (warm == NULL) warm = malloc(WARM_SAMPLES * sizeof(int16_t));
        size_t add = WARM_SAMPLES - warm_n < n ? WARM_SAMPLES - warm_n : n;
        memcpy(warm + warm_n, pcm, add * 2);
        warm_n += add, pcm += add, n -= add;
        if (warm_n < WARM_SAMPLES) return 0;
        warm_flush(ps, mean_fe, feat, cmn_init_vec, cmn_vec, ncep);
      }
      feed_raw(ps, pcm, n);
      return 0;
    case OP_HYP: {
      /* The running hypothesis, and each word's end frame against the frames decoded so
       * far, so the caller can tell settled words from the still-moving tail. */
      const char *hyp = NULL;
      char last[2][256] = { "", "" };
      double eos = 0;
      int have_eos = 0;
      if (stream_open && !warming) hyp = ps_get_hyp(ps, NULL);
      printf("{\"hyp\":");
      json_string(stdout, hyp ? hyp : "");
      printf(",\"frames\":%d,\"words\":[", stream_open && !warming ? ps_get_n_frames(ps) : 0);
      if (hyp) {
        char word[256];
        int n = 0;
        /* end frames among the frames kept, the units of "frames" (kept_seconds' comment):
         * counted from the latest return to speech, a word never looked settled */
        int offset = kept_offset(ps);
        for (ps_seg_t *it = ps_seg_iter(ps); it != NULL; it = ps_seg_next(it)) {
          const char *w = ps_seg_word(it);
          if (is_filler(w)) continue;
          int sf, ef;
          ps_seg_frames(it, &sf, &ef);
          base_word(w, word, sizeof word);
          printf("%s[", n++ ? "," : "");
          json_string(stdout, word);
          printf(",%d]", ef + 1 - offset);
          snprintf(last[0], sizeof last[0], "%s", last[1]);
          snprintf(last[1], sizeof last[1], "%s", word);
        }
        if (n > 0) eos = end_of_sentence(ps, default_search, n > 1 ? last[0] : "<s>", last[1], &have_eos);
      }
      printf("]");
      /* log10 P(</s> | the last two words) from the language model: how likely the
       * sentence ends here (services/vad/turn-taking.ts); absent with no words */
      if (have_eos) printf(",\"eos\":%.3f", eos);
      printf("}\n");
      fflush(stdout);
      return 0;
    }
    case OP_END: {
      first_segment = 1;
      printf("{\"segments\":[");
      if (stream_open) {
        warm_flush(ps, mean_fe, feat, cmn_init_vec, cmn_vec, ncep);
        feed_flush(ps);
        end_utterance(ps, frate, 1);
        stream_open = 0;
      }
      mfcc_t v[64];
      cmn_live_get(feat->cmn_struct, v);
      printf("],\"cmn\":[");
      for (int i = 0; i < ncep && i < 64; i++) printf("%s%.4f", i ? "," : "", (double)v[i]);
      printf("]}\n");
      fflush(stdout);
      if (stream_biased) { ps_set_search(ps, default_search); stream_biased = 0; }
      return 0;
    }
    default:
      printf("{\"error\":\"bad stream op\"}\n");
      fflush(stdout);
      return -1;
  }
}

/*
 * Forced alignment for the embedded reviewer (see the header comment): each align line
 * becomes a one-sentence JSGF grammar (optional silence and fillers between words, as
 * the grammar search always allows) decoded over its sample range. Comparing the
 * acoustic score of a segment's words with that of the same segment with a span
 * replaced tells which of the two the audio supports, with no language model involved.
 */
static ps_decoder_t *aligner;
static feat_t *aligner_feat;
static int aligner_added;
#define MAX_ADDED_WORDS 20000

static ps_decoder_t *aligner_get(const char *hmm, const char *dict) {
  if (aligner && aligner_added > MAX_ADDED_WORDS) { ps_free(aligner); aligner = NULL; }
  if (aligner) return aligner;
  /* No -lm: the decoder is only ever switched to per-request grammars. Silence removal
   * off, so every frame of the range is aligned; wide beams, so a forced path survives. */
  cmd_ln_t *c = cmd_ln_init(NULL, ps_args(), TRUE, "-hmm", hmm, "-dict", dict, "-logfn", "/dev/null", "-mmap", "no",
                            "-remove_silence", "no", "-beam", "1e-100", "-pbeam", "1e-100", "-wbeam", "1e-80", NULL);
  if (c == NULL) return NULL;
  aligner = ps_init(c);
  cmd_ln_free_r(c);
  if (aligner == NULL) return NULL;
  aligner_feat = ps_get_feat(aligner);
  aligner_added = 0;
  return aligner;
}

static void align_one(ps_decoder_t *al, const int16_t *pcm, uint32_t n, char *line, const mfcc_t *cmn) {
  char *save = NULL;
  strtok_r(line, " \t", &save); /* "align" */
  char *a = strtok_r(NULL, " \t", &save), *b = strtok_r(NULL, " \t", &save);
  if (!a || !b) { printf("null"); return; }
  long from = strtol(a, NULL, 10), to = strtol(b, NULL, 10);
  if (from < 0) from = 0;
  if (to > (long)n) to = (long)n;
  if (to - from < 1600) { printf("null"); return; }
  static char jsgf[16384];
  int len = snprintf(jsgf, sizeof jsgf, "#JSGF V1.0;\ngrammar align;\npublic <s> =");
  int words = 0;
  char *expect[512];
  for (char *w = strtok_r(NULL, " \t", &save); w && words < 512; w = strtok_r(NULL, " \t", &save)) {
    char *phones = ps_lookup_word(al, w);
    if (phones == NULL) { printf("null"); return; }
    ckd_free(phones);
    len += snprintf(jsgf + len, sizeof jsgf - len, " %s", w);
    if (len >= (int)sizeof jsgf - 4) { printf("null"); return; }
    expect[words++] = w;
  }
  if (words == 0) { printf("null"); return; }
  snprintf(jsgf + len, sizeof jsgf - len, ";\n");
  if (ps_set_jsgf_string(al, "align", jsgf) < 0 || ps_set_search(al, "align") < 0) { printf("null"); return; }
  /* Each alignment from the same state: a new stream (the front end's noise estimate
   * reset) and the slice's cepstral mean, whatever was aligned before. */
  cmn_live_set(aligner_feat->cmn_struct, (mfcc_t *)cmn);
  ps_start_stream(al);
  ps_start_utt(al);
  ps_process_raw(al, pcm + from, (size_t)(to - from), FALSE, TRUE);
  ps_end_utt(al);
  int32 score;
  const char *hyp = ps_get_hyp(al, &score);
  if (hyp == NULL) { printf("null"); ps_unset_search(al, "align"); return; }
  /* The grammar has one path; a hypothesis that is not all of it did not reach the end. */
  char word[256];
  long ascr_total = 0;
  int k = 0, ok = 1, frames = ps_get_n_frames(al);
  static char out[65536];
  int olen = 0;
  for (ps_seg_t *it = ps_seg_iter(al); it != NULL; it = ps_seg_next(it)) {
    int32 ascr, lscr, lback;
    ps_seg_prob(it, &ascr, &lscr, &lback);
    ascr_total += ascr;
    const char *w = ps_seg_word(it);
    if (is_filler(w)) continue;
    base_word(w, word, sizeof word);
    if (k >= words || strcmp(word, expect[k])) ok = 0;
    int sf, ef;
    ps_seg_frames(it, &sf, &ef);
    if (olen < (int)sizeof out - 300) olen += snprintf(out + olen, sizeof out - olen, "%s[\"%s\",%d,%d]", k ? "," : "", word, sf, ef + 1);
    k++;
  }
  if (!ok || k != words) { printf("null"); ps_unset_search(al, "align"); return; }
  printf("{\"ascr\":%ld,\"frames\":%d,\"words\":[%s]}", ascr_total, frames, out);
  ps_unset_search(al, "align");
}

/* One alignment request (see the header comment). Returns -1 on EOF. */
static int align_request(const char *hmm, const char *dict, fe_t *mean_fe, int ncep, int frate, uint32_t n, uint32_t tlen) {
  static char *text;
  static int16_t *apcm;
  static size_t acap;
  if (tlen > (1u << 20) || n > 16000u * 3600) { printf("{\"error\":\"alignment request too large\"}\n"); fflush(stdout); return -1; }
  text = realloc(text, tlen + 1);
  if (tlen && read_full(text, tlen) < 0) return -1;
  text[tlen] = 0;
  if (n > acap) { acap = n; apcm = realloc(apcm, acap * sizeof(int16_t)); }
  if (n && read_full(apcm, (size_t)n * 2) < 0) return -1;
  ps_decoder_t *al = aligner_get(hmm, dict);
  if (al == NULL) { printf("{\"error\":\"aligner failed to start\"}\n"); fflush(stdout); return 0; }
  mfcc_t mean[64];
  if (!clip_cmn_mean(mean_fe, apcm, n, mean, ncep)) cmn_live_get(aligner_feat->cmn_struct, mean);
  /* Pronunciations come first in the text (the client writes them so), then the lines to align. */
  printf("{\"alignments\":[");
  int first = 1;
  for (char *line = text; line && *line; ) {
    char *next = strchr(line, '\n');
    if (next) *next = 0;
    char *sp = !strncmp(line, "word ", 5) ? strchr(line + 5, ' ') : NULL;
    if (sp) {
      *sp = 0;
      char *phones = ps_lookup_word(al, line + 5);
      if (phones) ckd_free(phones);
      else if (ps_add_word(al, line + 5, sp + 1, FALSE) >= 0) aligner_added++;
    } else if (!strncmp(line, "align ", 6)) {
      printf("%s", first ? "" : ",");
      first = 0;
      align_one(al, apcm, n, line, mean);
    }
    line = next ? next + 1 : NULL;
  }
  printf("]}\n");
  fflush(stdout);
  return 0;
}

/* --align-only: the alignment decoder alone (no language model, about a fifth of the
 * memory); any other request is answered with an error. */
static int serve_alignments(cmd_ln_t *config, const char *hmm, const char *dict) {
  ps_decoder_t *al = aligner_get(hmm, dict);
  if (al == NULL) { printf("{\"error\":\"model load failed\"}\n"); fflush(stdout); return 2; }
  int frate = cmd_ln_int32_r(config, "-frate");
  int ncep = feat_cepsize(aligner_feat);
  fe_t *mean_fe = fe_init_auto_r(config);
  printf("{\"ready\":true,\"frate\":%d}\n", frate);
  fflush(stdout);
  for (;;) {
    uint32_t head[3];
    if (read_full(head, sizeof head) < 0) break;
    if (head[0] != MAGIC_ALIGN) { printf("{\"error\":\"this process serves alignment requests only\"}\n"); fflush(stdout); return 3; }
    if (align_request(hmm, dict, mean_fe, ncep, frate, head[1], head[2]) < 0) break;
  }
  return 0;
}

int main(int argc, char **argv) {
  const char *model = argc > 1 ? argv[1] : "/usr/share/pocketsphinx/model/en-us";
  char hmm[1024], lmp[1024], dict[1024];
  snprintf(hmm, sizeof hmm, "%s/en-us", model);
  snprintf(lmp, sizeof lmp, "%s/en-us.lm.bin", model);
  snprintf(dict, sizeof dict, "%s/cmudict-en-us.dict", model);
  err_set_logfp(NULL);
  /* -maxhmmpf 5000 -maxwpf 20 bound the active search per frame: 38% less CPU than the
   * defaults (30000 / unbounded) with the same word error rate on the labelled clips.
   * Both clients tighten them further with their own options (engine.ts
   * COMMIT_DECODER_OPTIONS, stream-decoders.ts STREAM_DECODER_OPTIONS; the tables in
   * docs/segment.md and docs/realtime.md). */
  cmd_ln_t *config = cmd_ln_init(NULL, ps_args(), TRUE, "-hmm", hmm, "-lm", lmp, "-dict", dict,
                                 "-logfn", "/dev/null", "-mmap", "no", "-maxhmmpf", "5000", "-maxwpf", "20", NULL);
  if (config == NULL) { printf("{\"error\":\"bad configuration\"}\n"); return 2; }
  /* Further arguments are decoder options as name/value pairs (e.g. -maxhmmpf 3000),
   * or --align-only: serve alignment requests only, without loading the language model. */
  int align_only = argc > 2 && !strcmp(argv[2], "--align-only");
  if (argc > 3 && !align_only) {
    config = cmd_ln_parse_r(config, ps_args(), argc - 2, argv + 2, FALSE);
    if (config == NULL) { printf("{\"error\":\"bad decoder options\"}\n"); fflush(stdout); return 2; }
  }
  if (align_only) return serve_alignments(config, hmm, dict);
  ps_decoder_t *ps = ps_init(config);
  if (ps == NULL) { printf("{\"error\":\"model load failed\"}\n"); fflush(stdout); return 2; }
  int frate = cmd_ln_int32_r(config, "-frate");
  char default_search[64];
  snprintf(default_search, sizeof default_search, "%s", ps_get_search(ps));
  /* Live cepstral mean normalisation adapts across utterances; restoring the start-up
   * estimate before every request makes each request independent of the ones before
   * it (same clip, same text, whichever tenant came first). */
  feat_t *feat = ps_get_feat(ps);
  mfcc_t *cmn_init_vec = ckd_calloc(feat_cepsize(feat), sizeof(mfcc_t));
  cmn_live_get(feat->cmn_struct, cmn_init_vec);
  int ncep = feat_cepsize(feat);
  mfcc_t *cmn_clip_vec = ckd_calloc(ncep, sizeof(mfcc_t));
  fe_t *mean_fe = fe_init_auto_r(config);
  printf("{\"ready\":true,\"frate\":%d}\n", frate);
  fflush(stdout);

  int16_t *pcm = NULL;
  size_t cap = 0;
  char *prompt = NULL;
  for (;;) {
    uint32_t head[3];
    if (read_full(head, sizeof head) < 0) break;
    if (head[0] == MAGIC_STREAM) {
      if (stream_request(ps, config, default_search, feat, mean_fe, cmn_init_vec, cmn_clip_vec, ncep, frate, head[1], head[2]) < 0) break;
      continue;
    }
    if (head[0] == MAGIC_ALIGN) {
      if (align_request(hmm, dict, mean_fe, ncep, frate, head[1], head[2]) < 0) break;
      continue;
    }
    if (head[0] != MAGIC) { printf("{\"error\":\"bad request framing\"}\n"); fflush(stdout); return 3; }
    uint32_t n = head[1], plen = head[2];
    if (plen > 65536) { printf("{\"error\":\"prompt too long\"}\n"); fflush(stdout); return 3; }
    prompt = realloc(prompt, plen + 1);
    if (plen && read_full(prompt, plen) < 0) break;
    prompt[plen] = 0;
    if (n > cap) { cap = n; pcm = realloc(pcm, cap * sizeof(int16_t)); }
    if (n && read_full(pcm, (size_t)n * 2) < 0) break;
    int biased = plen ? use_prompt(ps, config, default_search, prompt) : 0;

    cmn_live_set(feat->cmn_struct, clip_cmn_mean(mean_fe, pcm, n, cmn_clip_vec, ncep) ? cmn_clip_vec : cmn_init_vec);
    first_segment = 1;
    printf("{\"segments\":[");
    ps_start_stream(ps);
    ps_start_utt(ps);
    int utt_started = 0;
    for (uint32_t off = 0; off < n; off += CHUNK) {
      uint32_t len = n - off < CHUNK ? n - off : CHUNK;
      ps_process_raw(ps, pcm + off, len, FALSE, FALSE);
      int in_speech = ps_get_in_speech(ps);
      if (in_speech && !utt_started) utt_started = 1;
      if (!in_speech && utt_started) {
        end_utterance(ps, frate, 0);
        ps_start_utt(ps);
        utt_started = 0;
      }
    }
    if (utt_started) end_utterance(ps, frate, 0);
    else ps_end_utt(ps);
    printf("],\"promptWords\":%d}\n", biased);
    if (biased) ps_set_search(ps, default_search);
    fflush(stdout);
  }
  ps_free(ps);
  cmd_ln_free_r(config);
  return 0;
}
