/* S2VT data (formats in include/pipedream/sequence.h): the features file
 * and the captions file, read with every count checked before anything is
 * allocated from it, written atomically; a synthetic generator; and the
 * minibatch iterator that lays captions out as decoder inputs and targets. */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <pipedream/sequence.h>

#include "core/pd_atomic_file.h"
#include "core/pd_rng.h"
#include "data/pd_data_int.h"

#define FEATURES_MAGIC "PDS2VTF1"
#define CAPTIONS_MAGIC "PDS2VTC1"
#define FEATURES_HEADER_BYTES 24
#define MAX_VOCAB (1 << 30)
#define MAX_DIM 0x7fffffffu        /* N, T and F end up in int32 indices and ints */
#define WRITE_CHUNK (1 << 16)      /* bytes staged per write */

/* ---- little-endian bytes ------------------------------------------------- */

static bool host_is_little_endian(void)
{
    const uint16_t one = 1;
    unsigned char first;

    memcpy(&first, &one, 1);
    return first == 1;
}

static uint32_t get_u32le(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get_u64le(const unsigned char *p) { return (uint64_t)get_u32le(p) | (uint64_t)get_u32le(p + 4) << 32; }

static void put_u32le(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static void put_u64le(unsigned char *p, uint64_t v)
{
    put_u32le(p, (uint32_t)v);
    put_u32le(p + 4, (uint32_t)(v >> 32));
}

/* Reverses the bytes of n 4-byte words in place (big-endian hosts only). */
static void swap_words(void *data, size_t n)
{
    unsigned char *p = data;

    for (size_t i = 0; i < n; i++, p += 4) {
        unsigned char a = p[0], b = p[1];
        p[0] = p[3];
        p[1] = p[2];
        p[2] = b;
        p[3] = a;
    }
}

/* ---- data sets ----------------------------------------------------------- */

void pd_s2vt_destroy(pd_s2vt_dataset *ds)
{
    if (!ds)
        return;
    free(ds->feats);
    free(ds->video);
    free(ds->offset);
    free(ds->words);
    free(ds);
}

/* PD_EINVAL naming the first inconsistency of `ds` (`what` names the
 * caller); the reader's rules, so whatever passes can be written and read
 * back. The scan for non-finite features (one pass over all of them) only
 * when `check_features`. */
static pd_status check_dataset(const pd_s2vt_dataset *ds, const char *what, bool check_features)
{
    if (!ds)
        return PD_ERROR(PD_EINVAL, "%s: NULL data set", what);
    if (ds->videos <= 0 || ds->frames <= 0 || ds->features <= 0)
        return PD_ERROR(PD_EINVAL, "%s: videos %lld, frames %d and features %d must be positive", what,
                        (long long)ds->videos, ds->frames, ds->features);
    if (ds->vocab <= PD_S2VT_FIRST_WORD || ds->vocab > MAX_VOCAB)
        return PD_ERROR(PD_EINVAL, "%s: vocabulary %d outside (%d, %d]", what, ds->vocab, PD_S2VT_FIRST_WORD,
                        MAX_VOCAB);
    if (ds->captions <= 0)
        return PD_ERROR(PD_EINVAL, "%s: %lld captions; at least one is needed", what, (long long)ds->captions);
    if (!ds->feats || !ds->video || !ds->offset || !ds->words)
        return PD_ERROR(PD_EINVAL, "%s: NULL feats, video, offset or words array", what);
    if (ds->offset[0] != 0)
        return PD_ERROR(PD_EINVAL, "%s: offset[0] is %lld, not 0", what, (long long)ds->offset[0]);
    for (int64_t c = 0; c < ds->captions; c++) {
        if (ds->video[c] < 0 || ds->video[c] >= ds->videos)
            return PD_ERROR(PD_EINVAL, "%s: caption %lld: video %d outside [0, %lld)", what, (long long)c,
                            (int)ds->video[c], (long long)ds->videos);
        if (ds->offset[c + 1] <= ds->offset[c])
            return PD_ERROR(PD_EINVAL, "%s: caption %lld is empty (offsets %lld, %lld)", what, (long long)c,
                            (long long)ds->offset[c], (long long)ds->offset[c + 1]);
        for (int64_t i = ds->offset[c]; i < ds->offset[c + 1]; i++)
            if (ds->words[i] < PD_S2VT_FIRST_WORD || ds->words[i] >= ds->vocab)
                return PD_ERROR(PD_EINVAL, "%s: caption %lld, word %lld: id %d outside [%d, %d)", what, (long long)c,
                                (long long)(i - ds->offset[c]), (int)ds->words[i], PD_S2VT_FIRST_WORD, ds->vocab);
    }
    int64_t n = check_features ? ds->videos * ds->frames * ds->features : 0;
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(ds->feats[i]))
            return PD_ERROR(PD_EINVAL, "%s: feature [%lld,%lld,%lld] is not finite", what,
                            (long long)(i / ((int64_t)ds->frames * ds->features)),
                            (long long)(i / ds->features % ds->frames), (long long)(i % ds->features));
    return PD_OK;
}

/* ---- reading -------------------------------------------------------------- */

/* Opens a regular file for reading; *size receives its length. */
static pd_status open_input(const char *path, FILE **out, uint64_t *size)
{
    FILE *f;

    PD_CHECK(pd_data_regular_file(path, size));
    if (!(f = fopen(path, "rb")))
        return PD_ERROR(PD_EIO, "%s: cannot open: %s", path, strerror(errno));
    *out = f;
    return PD_OK;
}

static pd_status read_features(const char *path, pd_s2vt_dataset *ds)
{
    unsigned char head[FEATURES_HEADER_BYTES];
    uint64_t size, n;
    uint32_t t, feat;
    FILE *f = NULL;
    pd_status s = PD_OK;

    PD_CHECK(open_input(path, &f, &size));
    size_t want = size < FEATURES_HEADER_BYTES ? (size_t)size : FEATURES_HEADER_BYTES;
    if (fread(head, 1, want, f) != want) {
        s = PD_ERROR(PD_EIO, "%s: read failed: %s", path, strerror(errno));
        goto close;
    }
    if (want < 8 || memcmp(head, FEATURES_MAGIC, 8) != 0) {
        s = PD_ERROR(PD_EFORMAT, "%s: not an S2VT features file (it does not start with \"" FEATURES_MAGIC "\")",
                     path);
        goto close;
    }
    if (want < FEATURES_HEADER_BYTES) {
        s = PD_ERROR(PD_EFORMAT, "%s: truncated header (%zu of %d bytes)", path, want, FEATURES_HEADER_BYTES);
        goto close;
    }
    n = get_u64le(head + 8);
    t = get_u32le(head + 16);
    feat = get_u32le(head + 20);
    if (n == 0 || t == 0 || feat == 0 || n > MAX_DIM || t > MAX_DIM || feat > MAX_DIM) {
        s = PD_ERROR(PD_EFORMAT, "%s: header counts N=%llu videos, T=%u frames, F=%u features must lie in [1, %u]",
                     path, (unsigned long long)n, (unsigned)t, (unsigned)feat, MAX_DIM);
        goto close;
    }
    /* Compare with the length in floats, so no product overflows. */
    uint64_t have = (size - FEATURES_HEADER_BYTES) / 4, per_video = (uint64_t)t * feat;
    if (n > have / per_video) {
        s = PD_ERROR(PD_EFORMAT, "%s: truncated: the header announces %llu x %u x %u f32 features, the file has "
                     "%llu bytes after the header", path, (unsigned long long)n, (unsigned)t, (unsigned)feat,
                     (unsigned long long)(size - FEATURES_HEADER_BYTES));
        goto close;
    }
    if (size - FEATURES_HEADER_BYTES != n * per_video * 4) {
        s = PD_ERROR(PD_EFORMAT, "%s: %llu trailing bytes after the %llu x %u x %u f32 features the header announces",
                     path, (unsigned long long)(size - FEATURES_HEADER_BYTES - n * per_video * 4),
                     (unsigned long long)n, (unsigned)t, (unsigned)feat);
        goto close;
    }
    if (!(ds->feats = malloc((size_t)(n * per_video) * sizeof(float)))) {
        s = PD_ERROR(PD_ENOMEM, "%s: out of host memory for %llu x %u x %u features", path, (unsigned long long)n,
                     (unsigned)t, (unsigned)feat);
        goto close;
    }
    if (fread(ds->feats, sizeof(float), (size_t)(n * per_video), f) != (size_t)(n * per_video)) {
        s = ferror(f) ? PD_ERROR(PD_EIO, "%s: read failed: %s", path, strerror(errno))
                      : PD_ERROR(PD_EFORMAT, "%s: truncated while reading (the file shrank?)", path);
        goto close;
    }
    if (!host_is_little_endian())
        swap_words(ds->feats, (size_t)(n * per_video));
    for (uint64_t i = 0; i < n * per_video; i++)
        if (!isfinite(ds->feats[i])) {
            s = PD_ERROR(PD_EFORMAT, "%s: feature [%llu,%llu,%llu] (video, frame, feature) is not finite", path,
                         (unsigned long long)(i / per_video), (unsigned long long)(i / feat % t),
                         (unsigned long long)(i % feat));
            goto close;
        }
    ds->videos = (int64_t)n;
    ds->frames = (int)t;
    ds->features = (int)feat;
close:
    fclose(f);
    return s;
}

/* Parses a decimal number of at least one digit at *p, at most `max`;
 * advances *p past it. False if there is no digit or it exceeds `max`. */
static bool parse_decimal(const char **p, uint64_t max, uint64_t *out)
{
    const char *q = *p;
    uint64_t v = 0;

    if (*q < '0' || *q > '9')
        return false;
    for (; *q >= '0' && *q <= '9'; q++) {
        v = v * 10 + (uint64_t)(*q - '0');
        if (v > max)
            return false;
    }
    *p = q;
    *out = v;
    return true;
}

/* The first 40 bytes of `text` for a message, non-printable ones as '?'. */
static const char *excerpt(const char *text, char out[48])
{
    size_t i = 0;

    for (; text[i] && i < 40; i++)
        out[i] = text[i] >= 0x20 && text[i] < 0x7f ? text[i] : '?';
    out[i] = '\0';
    return out;
}

/* Capacities (in elements) of the growing caption arrays. */
typedef struct caption_arrays {
    int64_t video, offset, words;
} caption_arrays;

/* Makes *array (of `elem`-byte elements, *cap of them) hold `need`. */
static bool grow(void **array, int64_t *cap, int64_t need, size_t elem)
{
    if (need <= *cap)
        return true;
    int64_t n = *cap ? *cap : 64;
    while (n < need)
        n *= 2;
    void *p = realloc(*array, (size_t)n * elem);
    if (!p)
        return false;
    *array = p;
    *cap = n;
    return true;
}

/* Parses caption line `lineno` (no line end) into the data set. */
static pd_status parse_caption(const char *path, int64_t lineno, const char *line, pd_s2vt_dataset *ds,
                               caption_arrays *cap)
{
    const char *p = line;
    uint64_t video, id;
    int64_t c = ds->captions, first = ds->offset[c], n_words = 0;
    char shown[48];

    if (!parse_decimal(&p, UINT32_MAX, &video) || *p != '\t')
        return PD_ERROR(PD_EFORMAT, "%s:%lld: expected '<video index><TAB><word ids>', got \"%s\"", path,
                        (long long)lineno, excerpt(line, shown));
    if (video >= (uint64_t)ds->videos)
        return PD_ERROR(PD_EFORMAT, "%s:%lld: video %llu outside [0, %lld) (the features file's videos)", path,
                        (long long)lineno, (unsigned long long)video, (long long)ds->videos);
    p++;
    for (;;) {
        if (!parse_decimal(&p, UINT32_MAX, &id))
            return PD_ERROR(PD_EFORMAT, "%s:%lld: expected a word id at column %lld, got \"%s\"", path,
                            (long long)lineno, (long long)(p - line + 1), excerpt(p, shown));
        if (id < PD_S2VT_FIRST_WORD || id >= (uint64_t)ds->vocab)
            return PD_ERROR(PD_EFORMAT, "%s:%lld: word id %llu outside [%d, %d) (ids below %d are reserved)", path,
                            (long long)lineno, (unsigned long long)id, PD_S2VT_FIRST_WORD, ds->vocab,
                            PD_S2VT_FIRST_WORD);
        if (!grow((void **)&ds->words, &cap->words, first + n_words + 1, sizeof(*ds->words)))
            return PD_ERROR(PD_ENOMEM, "%s:%lld: out of host memory for the captions", path, (long long)lineno);
        ds->words[first + n_words++] = (int32_t)id;
        if (*p == '\0')
            break;
        if (*p != ' ')
            return PD_ERROR(PD_EFORMAT, "%s:%lld: unexpected character 0x%02x at column %lld (ids are separated by "
                            "single spaces)", path, (long long)lineno, (unsigned)(unsigned char)*p,
                            (long long)(p - line + 1));
        p++;
    }
    if (!grow((void **)&ds->video, &cap->video, c + 1, sizeof(*ds->video)) ||
        !grow((void **)&ds->offset, &cap->offset, c + 2, sizeof(*ds->offset)))
        return PD_ERROR(PD_ENOMEM, "%s:%lld: out of host memory for the captions", path, (long long)lineno);
    ds->video[c] = (int32_t)video;
    ds->offset[c + 1] = first + n_words;
    ds->captions = c + 1;
    return PD_OK;
}

static pd_status read_captions(const char *path, pd_s2vt_dataset *ds)
{
    caption_arrays cap = {0, 0, 0};
    char *line = NULL;
    size_t line_cap = 0;
    int64_t lineno = 0;
    uint64_t size, vocab;
    FILE *f = NULL;
    pd_status s = PD_OK;

    PD_CHECK(open_input(path, &f, &size));
    if (!grow((void **)&ds->offset, &cap.offset, 1, sizeof(*ds->offset))) {
        s = PD_ERROR(PD_ENOMEM, "%s: out of host memory", path);
        goto close;
    }
    ds->offset[0] = 0;
    ds->captions = 0;
    for (;;) {
        errno = 0;
        ssize_t len = getline(&line, &line_cap, f);
        if (len < 0) {
            if (ferror(f))
                s = PD_ERROR(PD_EIO, "%s: read failed: %s", path, strerror(errno ? errno : EIO));
            break;
        }
        lineno++;
        if ((size_t)len != strlen(line)) {
            s = PD_ERROR(PD_EFORMAT, "%s:%lld: NUL byte in a text line", path, (long long)lineno);
            break;
        }
        if (len > 0 && line[len - 1] == '\n')
            line[--len] = '\0';
        if (len > 0 && line[len - 1] == '\r')
            line[--len] = '\0';
        if (lineno == 1) {
            const char *p = line + strlen(CAPTIONS_MAGIC " ");
            char shown[48];
            if (strncmp(line, CAPTIONS_MAGIC " ", strlen(CAPTIONS_MAGIC " ")) != 0 ||
                !parse_decimal(&p, MAX_VOCAB, &vocab) || *p != '\0') {
                s = PD_ERROR(PD_EFORMAT, "%s:1: not an S2VT captions file: expected the header '" CAPTIONS_MAGIC
                             " <vocabulary size>', got \"%s\"", path, excerpt(line, shown));
                break;
            }
            if (vocab <= PD_S2VT_FIRST_WORD) {
                s = PD_ERROR(PD_EFORMAT, "%s:1: vocabulary size %llu leaves no word id (ids below %d are reserved)",
                             path, (unsigned long long)vocab, PD_S2VT_FIRST_WORD);
                break;
            }
            ds->vocab = (int)vocab;
            continue;
        }
        PD_CHECK_GOTO(parse_caption(path, lineno, line, ds, &cap), s, close);
    }
    if (s == PD_OK && lineno == 0)
        s = PD_ERROR(PD_EFORMAT, "%s: empty file; expected the header '" CAPTIONS_MAGIC " <vocabulary size>'", path);
    else if (s == PD_OK && ds->captions == 0)
        s = PD_ERROR(PD_EFORMAT, "%s: no caption lines after the header", path);
close:
    free(line);
    fclose(f);
    return s;
}

pd_status pd_s2vt_load(const char *features_path, const char *captions_path, pd_s2vt_dataset **out)
{
    pd_s2vt_dataset *ds;
    pd_status s;

    if (!features_path || !captions_path || !out)
        return PD_ERROR(PD_EINVAL, "s2vt: NULL path or output");
    if (!(ds = calloc(1, sizeof(*ds))))
        return PD_ERROR(PD_ENOMEM, "s2vt: out of host memory");
    PD_CHECK_GOTO(read_features(features_path, ds), s, fail);
    PD_CHECK_GOTO(read_captions(captions_path, ds), s, fail);
    *out = ds;
    return PD_OK;
fail:
    pd_s2vt_destroy(ds);
    return s;
}

/* ---- writing ---------------------------------------------------------- */

/* Text staged in a fixed buffer and appended to an atomic file in chunks. */
typedef struct text_out {
    pd_atomic_file *file;
    char buf[WRITE_CHUNK];
    size_t used;
} text_out;

static pd_status text_flush(text_out *o)
{
    pd_status s = o->used ? pd_atomic_file_write(o->file, o->buf, o->used) : PD_OK;
    o->used = 0;
    return s;
}

/* Appends a formatted piece shorter than 64 bytes. */
static pd_status text_put(text_out *o, const char *fmt, long long value)
{
    if (sizeof(o->buf) - o->used < 64)
        PD_CHECK(text_flush(o));
    o->used += (size_t)snprintf(o->buf + o->used, sizeof(o->buf) - o->used, fmt, value);
    return PD_OK;
}

static pd_status write_features(const pd_s2vt_dataset *ds, const char *path)
{
    unsigned char head[FEATURES_HEADER_BYTES];
    pd_atomic_file f;
    float chunk[WRITE_CHUNK / sizeof(float)];
    const size_t n = (size_t)ds->videos * (size_t)ds->frames * (size_t)ds->features;
    const bool swap = !host_is_little_endian();

    memcpy(head, FEATURES_MAGIC, 8);
    put_u64le(head + 8, (uint64_t)ds->videos);
    put_u32le(head + 16, (uint32_t)ds->frames);
    put_u32le(head + 20, (uint32_t)ds->features);
    PD_CHECK(pd_atomic_file_begin(path, &f));
    pd_status s = pd_atomic_file_write(&f, head, sizeof(head));
    for (size_t done = 0; s == PD_OK && done < n;) {
        size_t m = n - done < sizeof(chunk) / sizeof(float) ? n - done : sizeof(chunk) / sizeof(float);
        const float *src = ds->feats + done;
        if (swap) {
            memcpy(chunk, src, m * sizeof(float));
            swap_words(chunk, m);
            src = chunk;
        }
        s = pd_atomic_file_write(&f, src, m * sizeof(float));
        done += m;
    }
    if (s != PD_OK) {
        pd_atomic_file_abort(&f);
        return s;
    }
    return pd_atomic_file_commit(&f);
}

static pd_status write_captions(const pd_s2vt_dataset *ds, const char *path)
{
    pd_atomic_file f;
    text_out *o;
    pd_status s;

    if (!(o = malloc(sizeof(*o))))
        return PD_ERROR(PD_ENOMEM, "%s: out of host memory", path);
    o->used = 0;
    o->file = &f;
    PD_CHECK_GOTO(pd_atomic_file_begin(path, &f), s, free_buffer);
    PD_CHECK_GOTO(text_put(o, CAPTIONS_MAGIC " %lld\n", ds->vocab), s, abort);
    for (int64_t c = 0; c < ds->captions; c++) {
        PD_CHECK_GOTO(text_put(o, "%lld\t", ds->video[c]), s, abort);
        for (int64_t i = ds->offset[c]; i < ds->offset[c + 1]; i++)
            PD_CHECK_GOTO(text_put(o, i + 1 < ds->offset[c + 1] ? "%lld " : "%lld\n", ds->words[i]), s, abort);
    }
    PD_CHECK_GOTO(text_flush(o), s, abort);
    s = pd_atomic_file_commit(&f);
    goto free_buffer;
abort:
    pd_atomic_file_abort(&f);
free_buffer:
    free(o);
    return s;
}

pd_status pd_s2vt_write(const pd_s2vt_dataset *ds, const char *features_path, const char *captions_path)
{
    if (!features_path || !captions_path)
        return PD_ERROR(PD_EINVAL, "s2vt write: NULL path");
    PD_CHECK(check_dataset(ds, "s2vt write", true));
    PD_CHECK(write_features(ds, features_path));
    return write_captions(ds, captions_path);
}

/* ---- synthetic data ------------------------------------------------------- */

static pd_status check_synthetic(const pd_s2vt_synthetic_options *o)
{
    if (!o)
        return PD_ERROR(PD_EINVAL, "s2vt synthetic: NULL options");
    if (o->videos <= 0 || o->videos > (int64_t)MAX_DIM)
        return PD_ERROR(PD_EINVAL, "s2vt synthetic: videos %lld outside [1, %u]", (long long)o->videos, MAX_DIM);
    if (o->frames <= 0 || o->features <= 0)
        return PD_ERROR(PD_EINVAL, "s2vt synthetic: frames %d and features %d must be positive", o->frames,
                        o->features);
    if (o->vocab <= PD_S2VT_FIRST_WORD || o->vocab > MAX_VOCAB)
        return PD_ERROR(PD_EINVAL, "s2vt synthetic: vocabulary %d outside (%d, %d]", o->vocab, PD_S2VT_FIRST_WORD,
                        MAX_VOCAB);
    if (o->max_words <= 0 || o->templates <= 0)
        return PD_ERROR(PD_EINVAL, "s2vt synthetic: max_words %d and templates %d must be positive", o->max_words,
                        o->templates);
    if (!isfinite(o->noise) || o->noise < 0)
        return PD_ERROR(PD_EINVAL, "s2vt synthetic: noise %g must be finite and >= 0", (double)o->noise);
    return PD_OK;
}

pd_status pd_s2vt_synthetic(const pd_s2vt_synthetic_options *opts, pd_s2vt_dataset **out)
{
    pd_s2vt_dataset *ds = NULL;
    int64_t *tmpl_offset = NULL;
    int32_t *tmpl_words = NULL;
    float *proto = NULL;
    pd_status s = PD_OK;
    pd_rng rng;

    PD_CHECK(check_synthetic(opts));
    if (!out)
        return PD_ERROR(PD_EINVAL, "s2vt synthetic: NULL output");
    const int64_t n = opts->videos, k = opts->templates, plane = (int64_t)opts->frames * opts->features;
    const int64_t tmpl_max = k * opts->max_words;
    if (!(ds = calloc(1, sizeof(*ds))) || !(tmpl_offset = malloc((size_t)(k + 1) * sizeof(*tmpl_offset))) ||
        !(tmpl_words = malloc((size_t)tmpl_max * sizeof(*tmpl_words))) ||
        !(proto = malloc((size_t)(k * plane) * sizeof(*proto))) ||
        !(ds->feats = malloc((size_t)(n * plane) * sizeof(*ds->feats))) ||
        !(ds->video = malloc((size_t)n * sizeof(*ds->video))) ||
        !(ds->offset = malloc((size_t)(n + 1) * sizeof(*ds->offset))) ||
        !(ds->words = malloc((size_t)(n * opts->max_words) * sizeof(*ds->words)))) {
        s = PD_ERROR(PD_ENOMEM, "s2vt synthetic: out of host memory for %lld videos of %d x %d features",
                     (long long)n, opts->frames, opts->features);
        goto free_all;
    }
    ds->videos = n;
    ds->frames = opts->frames;
    ds->features = opts->features;
    ds->vocab = opts->vocab;
    ds->captions = n;

    /* The templates: captions and frame prototypes, from one stream. */
    pd_rng_init(&rng, pd_rng_mix64(opts->seed ^ 0x5332565443415054ULL));
    tmpl_offset[0] = 0;
    for (int64_t t = 0; t < k; t++) {
        int64_t len = 1 + (int64_t)(pd_rng_next(&rng) % (uint64_t)opts->max_words);
        for (int64_t i = 0; i < len; i++)
            tmpl_words[tmpl_offset[t] + i] =
                PD_S2VT_FIRST_WORD + (int32_t)(pd_rng_next(&rng) % (uint64_t)(opts->vocab - PD_S2VT_FIRST_WORD));
        tmpl_offset[t + 1] = tmpl_offset[t] + len;
    }
    for (int64_t i = 0; i < k * plane; i++)
        proto[i] = pd_rng_normal(&rng);

    /* Video v: template v mod k, its own noise stream. */
    ds->offset[0] = 0;
    for (int64_t v = 0; v < n; v++) {
        const int64_t t = v % k, len = tmpl_offset[t + 1] - tmpl_offset[t];
        float *dst = ds->feats + v * plane;
        pd_rng_init(&rng, pd_data_sample_seed(opts->seed, 0, v));
        for (int64_t i = 0; i < plane; i++)
            dst[i] = proto[t * plane + i] + (opts->noise > 0 ? opts->noise * pd_rng_normal(&rng) : 0.0f);
        ds->video[v] = (int32_t)v;
        memcpy(ds->words + ds->offset[v], tmpl_words + tmpl_offset[t], (size_t)len * sizeof(*ds->words));
        ds->offset[v + 1] = ds->offset[v] + len;
    }
    *out = ds;
    ds = NULL;
free_all:
    free(proto);
    free(tmpl_words);
    free(tmpl_offset);
    pd_s2vt_destroy(ds);
    return s;
}

/* ---- minibatches ------------------------------------------------------ */

struct pd_s2vt_batches {
    const pd_s2vt_dataset *ds;
    pd_s2vt_batches_options opts; /* num_shards normalised to >= 1 */
    int64_t *order;               /* [C] the caption at each position of the epoch */
    int64_t per_epoch;            /* minibatches of this shard per epoch */
    int64_t epoch, position;      /* of the next minibatch */
};

pd_status pd_s2vt_batches_create(const pd_s2vt_dataset *ds, const pd_s2vt_batches_options *opts,
                                 pd_s2vt_batches **out)
{
    pd_s2vt_batches *it;

    if (!opts || !out)
        return PD_ERROR(PD_EINVAL, "s2vt batches: NULL options or output");
    PD_CHECK(check_dataset(ds, "s2vt batches", false));
    if (opts->batch <= 0 || opts->words <= 0)
        return PD_ERROR(PD_EINVAL, "s2vt batches: batch %d and words %d must be positive", opts->batch, opts->words);
    int shards = opts->num_shards ? opts->num_shards : 1;
    if (shards < 0 || opts->shard < 0 || opts->shard >= shards)
        return PD_ERROR(PD_EINVAL, "s2vt batches: shard %d of %d (need 0 <= shard < num_shards)", opts->shard,
                        opts->num_shards);
    int64_t unsharded = opts->drop_last ? ds->captions / opts->batch
                                        : (ds->captions + opts->batch - 1) / opts->batch;
    int64_t per_epoch = opts->drop_last ? unsharded / shards : (unsharded - opts->shard + shards - 1) / shards;
    if (per_epoch <= 0)
        return PD_ERROR(PD_EINVAL, "s2vt batches: %lld captions in minibatches of %d leave no minibatch for shard "
                        "%d of %d", (long long)ds->captions, opts->batch, opts->shard, shards);
    if (!(it = calloc(1, sizeof(*it))) || !(it->order = malloc((size_t)ds->captions * sizeof(*it->order)))) {
        free(it);
        return PD_ERROR(PD_ENOMEM, "s2vt batches: out of host memory for the order of %lld captions",
                        (long long)ds->captions);
    }
    it->ds = ds;
    it->opts = *opts;
    it->opts.num_shards = shards;
    it->per_epoch = per_epoch;
    pd_data_epoch_order(it->order, ds->captions, opts->shuffle, opts->seed, 0);
    *out = it;
    return PD_OK;
}

/* Lays caption c out as decoder inputs and targets of W steps. */
static void lay_out_caption(const pd_s2vt_dataset *ds, int64_t c, int w, int32_t *words, int32_t *targets)
{
    const int32_t *caption = ds->words + ds->offset[c];
    const int64_t len = ds->offset[c + 1] - ds->offset[c];

    for (int t = 0; t < w; t++)
        targets[t] = t < len ? caption[t] : t == len ? PD_S2VT_EOS : PD_S2VT_IGNORE;
    words[0] = PD_S2VT_BOS;
    for (int t = 1; t < w; t++)
        words[t] = targets[t - 1] == PD_S2VT_IGNORE ? PD_S2VT_PAD : targets[t - 1];
}

pd_status pd_s2vt_batches_next(pd_s2vt_batches *it, float *features, int32_t *words, int32_t *targets,
                               int *valid)
{
    const pd_s2vt_dataset *ds = it->ds;
    const int batch = it->opts.batch, w = it->opts.words;
    const int64_t plane = (int64_t)ds->frames * ds->features;
    const int64_t first = (it->position * it->opts.num_shards + it->opts.shard) * batch;
    const int rows = ds->captions - first < batch ? (int)(ds->captions - first) : batch;

    if (!features || !words || !targets || !valid)
        return PD_ERROR(PD_EINVAL, "s2vt batches: NULL features, words, targets or count buffer");
    for (int r = 0; r < rows; r++) {
        int64_t c = it->order[first + r];
        memcpy(features + r * plane, ds->feats + (int64_t)ds->video[c] * plane, (size_t)plane * sizeof(*features));
        lay_out_caption(ds, c, w, words + (int64_t)r * w, targets + (int64_t)r * w);
    }
    for (int r = rows; r < batch; r++) {
        memset(features + r * plane, 0, (size_t)plane * sizeof(*features));
        for (int t = 0; t < w; t++) {
            words[(int64_t)r * w + t] = PD_S2VT_PAD;
            targets[(int64_t)r * w + t] = PD_S2VT_IGNORE;
        }
    }
    *valid = rows;
    if (++it->position == it->per_epoch) {
        it->position = 0;
        it->epoch++;
        pd_data_epoch_order(it->order, ds->captions, it->opts.shuffle, it->opts.seed, it->epoch);
    }
    return PD_OK;
}

int64_t pd_s2vt_batches_per_epoch(const pd_s2vt_batches *it) { return it->per_epoch; }

int64_t pd_s2vt_batches_epoch(const pd_s2vt_batches *it) { return it->epoch; }

int64_t pd_s2vt_batches_position(const pd_s2vt_batches *it) { return it->position; }

pd_status pd_s2vt_batches_seek(pd_s2vt_batches *it, int64_t epoch, int64_t batch)
{
    if (epoch < 0 || batch < 0 || batch > it->per_epoch)
        return PD_ERROR(PD_EINVAL, "s2vt batches: cannot seek to minibatch %lld of epoch %lld (%lld per epoch)",
                        (long long)batch, (long long)epoch, (long long)it->per_epoch);
    if (batch == it->per_epoch) {
        epoch++;
        batch = 0;
    }
    it->epoch = epoch;
    it->position = batch;
    pd_data_epoch_order(it->order, it->ds->captions, it->opts.shuffle, it->opts.seed, epoch);
    return PD_OK;
}

void pd_s2vt_batches_destroy(pd_s2vt_batches *it)
{
    if (!it)
        return;
    free(it->order);
    free(it);
}
