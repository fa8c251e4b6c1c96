/*
 * whisper-worker: whisper.cpp as a persistent process for the service's whisper engine
 * (services/transcriber/whisper-engine.ts), built from whisper.cpp's own sources for the
 * machine it runs on (scripts/build-native.sh: GGML_NATIVE, so AVX2/AVX-512/F16C where
 * the CPU has them).
 *
 * Why not the prebuilt Node binding the engine used before (@fugood/node-whisper-*): its
 * x64 builds carry no AVX instruction at all (objdump finds no vfmadd or vcvtph2ps), so
 * every f16 matrix product ran on the scalar path, and it decoded one clip at a time on
 * one thread: jfk.wav on a base-shaped model took over 400 s where whisper-cli built
 * here took 21 s (issue 45).
 *
 * The model is loaded once (weights shared); `--states N` decoder states over it decode
 * N clips at once, each on `--threads T` threads. Requests on stdin, little-endian:
 *
 *   uint32 magic 0x31505357 ("WSP1")
 *   uint32 id              echoed in the response
 *   uint32 n_samples       16 kHz mono signed 16-bit samples
 *   int32  audio_ctx       encoder frames to use (0: the model's 1500 = 30 s); a short
 *                          clip with a small audio_ctx skips most of the encoder's work
 *   uint32 flags           bit 0: temperature fallback (whisper's re-decode at higher
 *                          temperatures when a window looks like a loop or improbable)
 *   uint32 max_tokens      most text tokens (0: whisper's own limit); the benches hold
 *                          models with random weights, which never end a window by
 *                          themselves, to what speech of the clip's length holds. Given,
 *                          the clip is decoded in one pass without timestamp tokens:
 *                          whisper.cpp ends a window at its token limit with a forced
 *                          timestamp and seeks only to it, so random weights took many
 *                          encoder passes over one 5 s clip (13 s on a small shape)
 *   uint32 language_bytes, uint32 prompt_bytes, the language ("en", "auto", ...),
 *   the prompt (UTF-8, the initial prompt), then n_samples * 2 bytes of PCM
 *
 *   uint32 magic 0x32505357 ("WSP2"), uint32 id: abort that request (whisper's
 *   abort callback: the decode stops at its next graph step) and answer it
 *   {"id":n,"error":"aborted"}; unknown ids are ignored.
 *
 * Responses on stdout, one JSON line each, in completion order:
 *   {"id":n,"lang":"en","segments":[{"t0":ms,"t1":ms,"text":"..","ns":p},..]}
 *   or {"id":n,"error":".."}
 * Segments are whisper.cpp's with max_len 1 and token timestamps (the CLI's -ml 1):
 * one token each, so the engine rebuilds words and sentences with their times; `ns` is
 * the window's no-speech probability. The first line is {"ready":true,"states":N,...}.
 */
#include "whisper.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr uint32_t MAGIC_DECODE = 0x31505357;
constexpr uint32_t MAGIC_ABORT = 0x32505357;
/** More than an hour of audio in one request is a broken caller, not a clip. */
constexpr uint32_t MAX_SAMPLES = 16000u * 3600u * 4u;

struct Request {
    uint32_t id = 0;
    int32_t audio_ctx = 0;
    uint32_t flags = 0;
    uint32_t max_tokens = 0;
    std::string language;
    std::string prompt;
    std::vector<float> pcm;
    std::atomic<bool> aborted{false};
};

std::mutex out_mutex;

void write_line(const std::string & line) {
    std::lock_guard<std::mutex> lock(out_mutex);
    fwrite(line.data(), 1, line.size(), stdout);
    fputc('\n', stdout);
    fflush(stdout);
}

std::string json_string(const char * s) {
    std::string out = "\"";
    for (const unsigned char * p = reinterpret_cast<const unsigned char *>(s); *p; ++p) {
        switch (*p) {
            case '"': out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            case '\n': out += "\\n"; break;
            case '\r': out += "\\r"; break;
            case '\t': out += "\\t"; break;
            default:
                if (*p < 0x20) {
                    char buf[8];
                    snprintf(buf, sizeof buf, "\\u%04x", *p);
                    out += buf;
                } else {
                    out += static_cast<char>(*p);
                }
        }
    }
    return out + "\"";
}

bool read_exact(void * dst, size_t n) {
    auto * p = static_cast<uint8_t *>(dst);
    while (n > 0) {
        size_t got = fread(p, 1, n, stdin);
        if (got == 0) return false;
        p += got;
        n -= got;
    }
    return true;
}

bool read_u32(uint32_t & v) { return read_exact(&v, 4); }

struct Queue {
    std::mutex m;
    std::condition_variable cv;
    std::deque<std::shared_ptr<Request>> items;
    std::vector<std::shared_ptr<Request>> running;
    bool closed = false;
};

void decode(whisper_context * ctx, whisper_state * state, int threads, Request & req) {
    whisper_full_params p = whisper_full_default_params(WHISPER_SAMPLING_GREEDY);
    p.n_threads = threads;
    p.print_progress = false;
    p.print_realtime = false;
    p.print_special = false;
    p.print_timestamps = false;
    p.max_len = 1;
    p.token_timestamps = true;
    p.temperature = 0.0f;
    // off: one pass per window (what the realtime plane's re-decodes and a model with
    // random weights want); on: whisper's default fallback at +0.2 per pass
    p.temperature_inc = (req.flags & 1u) ? 0.2f : 0.0f;
    p.audio_ctx = req.audio_ctx;
    p.max_tokens = static_cast<int>(req.max_tokens);
    if (req.max_tokens > 0) {
        p.single_segment = true;
        p.no_timestamps = true;
    }
    p.language = req.language.c_str();
    p.initial_prompt = req.prompt.empty() ? nullptr : req.prompt.c_str();
    p.abort_callback = [](void * user) { return static_cast<std::atomic<bool> *>(user)->load(); };
    p.abort_callback_user_data = &req.aborted;
    if (whisper_full_with_state(ctx, state, p, req.pcm.data(), static_cast<int>(req.pcm.size())) != 0 || req.aborted.load()) {
        write_line("{\"id\":" + std::to_string(req.id) + ",\"error\":" + (req.aborted.load() ? "\"aborted\"" : "\"whisper_full failed\"") + "}");
        return;
    }
    std::string line = "{\"id\":" + std::to_string(req.id);
    const int lang = whisper_full_lang_id_from_state(state);
    line += ",\"lang\":" + json_string(lang >= 0 ? whisper_lang_str(lang) : req.language.c_str());
    line += ",\"segments\":[";
    const int n = whisper_full_n_segments_from_state(state);
    for (int i = 0; i < n; ++i) {
        if (i) line += ",";
        line += "{\"t0\":" + std::to_string(whisper_full_get_segment_t0_from_state(state, i) * 10);
        line += ",\"t1\":" + std::to_string(whisper_full_get_segment_t1_from_state(state, i) * 10);
        line += ",\"text\":" + json_string(whisper_full_get_segment_text_from_state(state, i));
        char ns[32];
        snprintf(ns, sizeof ns, "%.4f", whisper_full_get_segment_no_speech_prob_from_state(state, i));
        line += ",\"ns\":" + std::string(ns) + "}";
    }
    write_line(line + "]}");
}

}  // namespace

int main(int argc, char ** argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: whisper-worker <model.bin> [--states N] [--threads T]\n");
        return 2;
    }
    int states = 1;
    int threads = 1;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--states")) states = std::max(1, atoi(argv[i + 1]));
        else if (!strcmp(argv[i], "--threads")) threads = std::max(1, atoi(argv[i + 1]));
    }
    whisper_log_set([](enum ggml_log_level, const char *, void *) {}, nullptr);
    whisper_context_params cp = whisper_context_default_params();
    // a GPU where this build has a backend for one (scripts/build-native.sh builds CUDA
    // when nvcc is present); a CPU-only build ignores it
    cp.use_gpu = true;
    whisper_context * ctx = whisper_init_from_file_with_params_no_state(argv[1], cp);
    if (!ctx) {
        write_line("{\"error\":\"whisper.cpp could not load the model\"}");
        return 1;
    }
    std::vector<whisper_state *> pool;
    for (int i = 0; i < states; ++i) {
        whisper_state * s = whisper_init_state(ctx);
        if (!s) {
            write_line("{\"error\":\"whisper.cpp could not allocate a decoder state\"}");
            return 1;
        }
        pool.push_back(s);
    }
    write_line(std::string("{\"ready\":true,\"states\":") + std::to_string(states) + ",\"threads\":" + std::to_string(threads) +
               ",\"multilingual\":" + (whisper_is_multilingual(ctx) ? "true" : "false") + ",\"system\":" + json_string(whisper_print_system_info()) + "}");

    Queue q;
    std::vector<std::thread> workers;
    for (int i = 0; i < states; ++i) {
        workers.emplace_back([&, i] {
            for (;;) {
                std::shared_ptr<Request> req;
                {
                    std::unique_lock<std::mutex> lock(q.m);
                    q.cv.wait(lock, [&] { return q.closed || !q.items.empty(); });
                    if (q.items.empty()) return;
                    req = q.items.front();
                    q.items.pop_front();
                    q.running.push_back(req);
                }
                if (req->aborted.load()) write_line("{\"id\":" + std::to_string(req->id) + ",\"error\":\"aborted\"}");
                else decode(ctx, pool[i], threads, *req);
                std::lock_guard<std::mutex> lock(q.m);
                for (auto it = q.running.begin(); it != q.running.end(); ++it)
                    if (*it == req) { q.running.erase(it); break; }
            }
        });
    }

    for (;;) {
        uint32_t magic = 0;
        if (!read_u32(magic)) break;
        if (magic == MAGIC_ABORT) {
            uint32_t id = 0;
            if (!read_u32(id)) break;
            std::lock_guard<std::mutex> lock(q.m);
            for (auto & r : q.items) if (r->id == id) r->aborted = true;
            for (auto & r : q.running) if (r->id == id) r->aborted = true;
            continue;
        }
        if (magic != MAGIC_DECODE) {
            write_line("{\"error\":\"bad request magic\"}");
            break;
        }
        auto req = std::make_shared<Request>();
        uint32_t n = 0, audio_ctx = 0, lang_bytes = 0, prompt_bytes = 0;
        if (!read_u32(req->id) || !read_u32(n) || !read_u32(audio_ctx) || !read_u32(req->flags) || !read_u32(req->max_tokens) || !read_u32(lang_bytes) || !read_u32(prompt_bytes)) break;
        if (n > MAX_SAMPLES || lang_bytes > 64 || prompt_bytes > (1u << 20)) {
            write_line("{\"error\":\"request out of bounds\"}");
            break;
        }
        req->audio_ctx = static_cast<int32_t>(audio_ctx);
        req->language.resize(lang_bytes);
        req->prompt.resize(prompt_bytes);
        if ((lang_bytes && !read_exact(&req->language[0], lang_bytes)) || (prompt_bytes && !read_exact(&req->prompt[0], prompt_bytes))) break;
        std::vector<int16_t> pcm(n);
        if (n && !read_exact(pcm.data(), n * 2u)) break;
        req->pcm.resize(n);
        for (uint32_t i = 0; i < n; ++i) req->pcm[i] = pcm[i] / 32768.0f;
        std::lock_guard<std::mutex> lock(q.m);
        q.items.push_back(req);
        q.cv.notify_one();
    }
    {
        std::lock_guard<std::mutex> lock(q.m);
        // end of input: what was asked is still decoded and answered, then the process exits
        q.closed = true;
    }
    q.cv.notify_all();
    for (auto & t : workers) t.join();
    for (auto * s : pool) whisper_free_state(s);
    whisper_free(ctx);
    return 0;
}
