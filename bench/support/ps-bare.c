/*
 * ps-bare: PocketSphinx's own C API with nothing around it, the reference that
 * bench/engine-cost.ts holds ps-worker against (built on demand into build/ps-bare with
 * the same cc/pkg-config line as scripts/build-native.sh).
 *
 * Usage: ps-bare model-dir list-file hyp-every-samples cmn [-option value ...]
 *   list-file: one path per line, each 16 kHz mono PCM16LE (raw, no header).
 *   hyp-every-samples: read the running hypothesis (ps_get_hyp + ps_seg_iter, as a
 *   streaming partial does) every that many samples; 0 = never.
 *   cmn: "live": PocketSphinx's live CMN as it comes (carried on from clip to clip, as
 *   in pocketsphinx_continuous); "warm": seeded from the mean cepstrum of the clip's
 *   first 12,800 samples, as ps-worker's PSS2 START without an estimate; "clip": from
 *   the whole clip's, as ps-worker's PSS1. The seeding's CPU is counted in.
 * The decoder starts with ps-worker's built-in options (-maxhmmpf 5000 -maxwpf 20
 * -mmap no), then the given ones, so both run at identical settings.
 *
 * Each clip: ps_start_stream, ps_start_utt, ps_process_raw in 20 ms pieces,
 * ps_end_utt, ps_get_hyp; no VAD splitting. One JSON line per clip:
 *   {"hyp":"...","cpu":seconds}
 * where cpu is this process's CPU time spent on that clip only (the file was read
 * before; model loading is not counted).
 *
 * PS_BARE_REALTIME=1: the audio is decoded at the pace it is spoken, as a speaker's
 * decoder gets it in the service: 120 ms at a time (the pool's feed grain), sleeping
 * until the wall clock reaches the end of what was fed.
 */
#include <pocketsphinx.h>
#include <sphinxbase/err.h>
#include <sphinxbase/ckd_alloc.h>
#include <sphinxbase/feat.h>
#include <sphinxbase/cmn.h>
#include <sphinxbase/fe.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double cpu_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int16_t *read_clip(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long bytes = ftell(f);
  fseek(f, 0, SEEK_SET);
  int16_t *pcm = malloc(bytes + 2);
  *n = fread(pcm, 2, bytes / 2, f);
  fclose(f);
  return pcm;
}

/* The mean cepstrum of n samples, with a second front end (ps-worker's clip_cmn_mean). */
static int cmn_mean(fe_t *fe, const int16_t *pcm, size_t n, mfcc_t *mean, int ncep) {
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

int main(int argc, char **argv) {
  if (argc < 5) { fprintf(stderr, "usage: ps-bare model-dir list-file hyp-every-samples live|warm|clip [-option value ...]\n"); return 2; }
  char hmm[1024], lmp[1024], dict[1024];
  snprintf(hmm, sizeof hmm, "%s/en-us", argv[1]);
  snprintf(lmp, sizeof lmp, "%s/en-us.lm.bin", argv[1]);
  snprintf(dict, sizeof dict, "%s/cmudict-en-us.dict", argv[1]);
  long hyp_every = strtol(argv[3], NULL, 10);
  err_set_logfp(NULL);
  cmd_ln_t *config = cmd_ln_init(NULL, ps_args(), TRUE, "-hmm", hmm, "-lm", lmp, "-dict", dict,
                                 "-logfn", "/dev/null", "-mmap", "no", "-maxhmmpf", "5000", "-maxwpf", "20", NULL);
  const char *cmn = argv[4];
  if (argc > 6) config = cmd_ln_parse_r(config, ps_args(), argc - 5, argv + 5, FALSE);
  if (config == NULL) { fprintf(stderr, "bad options\n"); return 2; }
  ps_decoder_t *ps = ps_init(config);
  if (ps == NULL) { fprintf(stderr, "model load failed\n"); return 2; }
  feat_t *feat = ps_get_feat(ps);
  int ncep = feat_cepsize(feat);
  mfcc_t mean[64];
  fe_t *mean_fe = fe_init_auto_r(config);
  const char *pace = getenv("PS_BARE_REALTIME");
  int realtime = pace && !strcmp(pace, "1");
  FILE *list = fopen(argv[2], "r");
  if (!list) { fprintf(stderr, "cannot open %s\n", argv[2]); return 2; }
  char path[4096];
  while (fgets(path, sizeof path, list)) {
    path[strcspn(path, "\r\n")] = 0;
    if (!*path) continue;
    size_t n = 0;
    int16_t *pcm = read_clip(path, &n);
    if (!pcm) { fprintf(stderr, "cannot read %s\n", path); return 2; }
    double t0 = cpu_now();
    if (strcmp(cmn, "live") && cmn_mean(mean_fe, pcm, !strcmp(cmn, "warm") && n > 12800 ? 12800 : n, mean, ncep))
      cmn_live_set(feat->cmn_struct, mean);
    ps_start_stream(ps);
    ps_start_utt(ps);
    long since_hyp = 0;
    struct timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (size_t off = 0; off < n; off += 320) {
      if (realtime && off > 0 && off % 1920 == 0) {
        /* the next 120 ms of audio is due when the wall clock reaches its start */
        long long due_ns = (long long)start.tv_sec * 1000000000LL + start.tv_nsec + (long long)off * 62500LL;
        struct timespec due = { (time_t)(due_ns / 1000000000LL), (long)(due_ns % 1000000000LL) };
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &due, NULL);
      }
      size_t len = n - off < 320 ? n - off : 320;
      ps_process_raw(ps, pcm + off, len, FALSE, FALSE);
      since_hyp += (long)len;
      if (hyp_every > 0 && since_hyp >= hyp_every) {
        since_hyp = 0;
        if (ps_get_hyp(ps, NULL))
          for (ps_seg_t *it = ps_seg_iter(ps); it != NULL; it = ps_seg_next(it)) (void)ps_seg_word(it);
      }
    }
    ps_end_utt(ps);
    const char *hyp = ps_get_hyp(ps, NULL);
    double cpu = cpu_now() - t0;
    printf("{\"hyp\":\"%s\",\"cpu\":%.4f}\n", hyp ? hyp : "", cpu);
    fflush(stdout);
    free(pcm);
  }
  fclose(list);
  ps_free(ps);
  cmd_ln_free_r(config);
  return 0;
}
