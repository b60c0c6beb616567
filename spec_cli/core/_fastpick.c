/* The seeded choice from one float32 logits row, in one call: what
 * sampling.choose and sampling.decide do for a whole row (or candidates),
 * for every setting, without a numpy call per step.
 *
 * Why C: right after llama_decode the host's caches hold the model's
 * weights, and each numpy call then costs 5-20 us however small its
 * array; choosing a token took 20-40 of them (0.3-0.5 ms a row at
 * llama.cpp's defaults on a 2-core VM).  Here a row costs one pass over
 * the vocabulary and a walk over the few tokens that can be chosen.
 *
 * Same definition as sampling.py, step for step (its module docstring):
 *   0. the row's largest logit m and its first index (np.argmax's);
 *      block maxima (64 logits a block) found in the same pass, so every
 *      later question -- which tokens lie above a threshold -- reads only
 *      the blocks whose maximum reaches it;
 *   1. top-k: the tokens at or above the k-th largest logit (ties kept);
 *   2. top-p over what top-k kept: by z descending (ties by id), while the
 *      mass before a token is below top_p;
 *   3. min-p: x >= m + T log(min_p);
 *   4. q = exp(z - log_z) over what is left, z = x / T - m / T;
 *   5. the token: argmax of z - log_z + G(seed, pos, id), G the same
 *      counter-based Gumbel noise as sampling.gumbel (splitmix64).
 * Thresholds compare in float32, as numpy compares a float32 row with a
 * Python float.  The arithmetic after the cut is float64, as in numpy, but
 * sums run in another order: q may differ from dist.dist's in the
 * last bits (the choice, only at a tie that close).  Where q keeps more
 * than `head_cap` tokens after top-p or min-p it returns None and the
 * numpy path decides: whether it does depends on q's set alone, so a row
 * and its candidates (ids given) are decided alike, to the bit.
 *
 * Two entry points: choose (one row) and choose_rows (the rule's walk over
 * a verify batch, its rows in threads where built with OpenMP); and the
 * capsule `pick_api` (_pick.h), through which llama/_decodepick.c chooses
 * from a row right after llama_decode, with no Python between them.
 *
 * No numpy headers: rows come through the buffer protocol. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "_pick.h"
#if defined(__SSE2__) || defined(_M_X64)
#include <emmintrin.h>
#elif defined(__ARM_NEON) && defined(__aarch64__)
#include <arm_neon.h>
#endif
/* rows of a verify batch in several threads: where setup.py built with
 * OpenMP (llama.cpp's CPU backend uses the same libgomp, whose workers are
 * still spinning when a decode returns, so a parallel region costs ~us) */
#if defined(_OPENMP) && defined(__GNUC__)
#define ROWS_IN_THREADS 1
#endif

#define BLOCK 64

static const uint64_t GOLDEN = 0x9E3779B97F4A7C15ULL;

static uint64_t mix(uint64_t x) {
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
}

/* the noise's key at an output position: sampling.gumbel's */
static uint64_t noise_key(uint64_t seed, long long pos) {
    return mix(mix(seed + GOLDEN) + (uint64_t)pos * GOLDEN);
}

/* sampling.gumbel for one token, under noise_key(seed, pos) */
static double gumbel(uint64_t key, uint64_t token) {
    uint64_t x = mix((token * GOLDEN) ^ key) >> 11;
    double u = ((double)x + 0.5) * (1.0 / 9007199254740992.0);  /* 2^-53 */
    return -log(-log(u));
}

/* one block of BLOCK logits: its maximum, and their sum added to *sum */
static float block_max(const float *p, float *sum) {
#if defined(__SSE2__) || defined(_M_X64)
    __m128 m0 = _mm_loadu_ps(p), m1 = _mm_loadu_ps(p + 4), m2 = _mm_loadu_ps(p + 8), m3 = _mm_loadu_ps(p + 12);
    __m128 s0 = m0, s1 = m1, s2 = m2, s3 = m3;
    for (int i = 16; i < BLOCK; i += 16) {
        __m128 v0 = _mm_loadu_ps(p + i), v1 = _mm_loadu_ps(p + i + 4);
        __m128 v2 = _mm_loadu_ps(p + i + 8), v3 = _mm_loadu_ps(p + i + 12);
        m0 = _mm_max_ps(m0, v0), m1 = _mm_max_ps(m1, v1), m2 = _mm_max_ps(m2, v2), m3 = _mm_max_ps(m3, v3);
        s0 = _mm_add_ps(s0, v0), s1 = _mm_add_ps(s1, v1), s2 = _mm_add_ps(s2, v2), s3 = _mm_add_ps(s3, v3);
    }
    float mv[4], sv[4];
    _mm_storeu_ps(mv, _mm_max_ps(_mm_max_ps(m0, m1), _mm_max_ps(m2, m3)));
    _mm_storeu_ps(sv, _mm_add_ps(_mm_add_ps(s0, s1), _mm_add_ps(s2, s3)));
    *sum += (sv[0] + sv[1]) + (sv[2] + sv[3]);
    float m = mv[0];
    for (int j = 1; j < 4; j++) m = mv[j] > m ? mv[j] : m;
    return m;
#elif defined(__ARM_NEON) && defined(__aarch64__)
    float32x4_t m0 = vld1q_f32(p), m1 = vld1q_f32(p + 4), s0 = m0, s1 = m1;
    for (int i = 8; i < BLOCK; i += 8) {
        float32x4_t v0 = vld1q_f32(p + i), v1 = vld1q_f32(p + i + 4);
        m0 = vmaxq_f32(m0, v0), m1 = vmaxq_f32(m1, v1);
        s0 = vaddq_f32(s0, v0), s1 = vaddq_f32(s1, v1);
    }
    *sum += vaddvq_f32(vaddq_f32(s0, s1));
    return vmaxvq_f32(vmaxq_f32(m0, m1));
#else
    float m = p[0];
    for (int i = 0; i < BLOCK; i++) {
        m = p[i] > m ? p[i] : m;
        *sum += p[i];
    }
    return m;
#endif
}

/* Block maxima of x (nb = ceil(n / BLOCK) of them) and the row's argmax:
 * the first index holding the largest value; -1 where the row holds a NaN
 * (or both infinities: numpy's path then decides, as np.argmax takes a NaN
 * for the largest). */
static int64_t scan(const float *x, int64_t n, float *bmax, int64_t nb) {
    float sum = 0.0f;  /* NaN where some logit is (a max can pass one over) */
    for (int64_t b = 0; b < nb; b++) {
        const float *p = x + b * BLOCK;
        int64_t len = (b + 1) * BLOCK <= n ? BLOCK : n - b * BLOCK;
        float m = p[0];
        if (len == BLOCK) {
            m = block_max(p, &sum);
        } else {
            for (int64_t i = 0; i < len; i++) {
                m = p[i] > m ? p[i] : m;
                sum += p[i];
            }
        }
        bmax[b] = m;
    }
    int nan = sum != sum;
    if (nan) return -1;
    int64_t best = 0;
    for (int64_t b = 1; b < nb; b++)
        if (bmax[b] > bmax[best]) best = b;
    const float *p = x + best * BLOCK;
    int64_t i = 0;
    while (p[i] != bmax[best]) i++;
    return best * BLOCK + i;
}

/* How many tokens have x >= thr, reading only blocks whose maximum reaches it. */
static int64_t count_above(const float *x, int64_t n, const float *bmax, int64_t nb, float thr) {
    int64_t c = 0;
    for (int64_t b = 0; b < nb; b++) {
        if (!(bmax[b] >= thr)) continue;
        int64_t i = b * BLOCK, end = (b + 1) * BLOCK <= n ? (b + 1) * BLOCK : n;
#if defined(__SSE2__) || defined(_M_X64)
        if (end - i == BLOCK) {
            const __m128 vthr = _mm_set1_ps(thr);
            __m128i k = _mm_setzero_si128();
            for (int j = 0; j < BLOCK; j += 4)  /* a true compare is -1 in each lane */
                k = _mm_sub_epi32(k, _mm_castps_si128(_mm_cmpge_ps(_mm_loadu_ps(x + i + j), vthr)));
            int32_t kv[4];
            _mm_storeu_si128((__m128i *)kv, k);
            c += (int64_t)kv[0] + kv[1] + kv[2] + kv[3];
            continue;
        }
#endif
        for (; i < end; i++) c += x[i] >= thr;
    }
    return c;
}

/* Ids (ascending) of the tokens with x >= thr, reading only blocks whose
 * maximum reaches it; returns how many there are, filling at most cap
 * (without a branch per token: where half of them pass, one would be
 * mispredicted half the time). */
static int64_t above(const float *x, int64_t n, const float *bmax, int64_t nb, float thr,
                     int32_t *ids, int64_t cap) {
    int64_t c = 0;
    for (int64_t b = 0; b < nb; b++) {
        if (!(bmax[b] >= thr)) continue;
        int64_t end = (b + 1) * BLOCK <= n ? (b + 1) * BLOCK : n;
        if (c + (end - b * BLOCK) > cap) {  /* may not fit: count the rest */
            for (int64_t i = b * BLOCK; i < end; i++) {
                if (c < cap) ids[c] = (int32_t)i;
                c += x[i] >= thr;
            }
            continue;
        }
        for (int64_t i = b * BLOCK; i < end; i++) {
            ids[c] = (int32_t)i;
            c += x[i] >= thr;
        }
    }
    return c;
}

/* the k-th largest of v[0..n) (n >= k >= 1); v is reordered */
static float kth_largest(float *v, int64_t n, int64_t k) {
    int64_t lo = 0, hi = n - 1, want = k - 1;  /* quickselect, descending */
    while (lo < hi) {
        float pivot = v[lo + (hi - lo) / 2];
        int64_t i = lo, j = hi;
        while (i <= j) {
            while (v[i] > pivot) i++;
            while (v[j] < pivot) j--;
            if (i <= j) { float t = v[i]; v[i] = v[j]; v[j] = t; i++; j--; }
        }
        if (want <= j) hi = j;
        else if (want >= i) lo = i;
        else return v[want];
    }
    return v[want];
}

/* The k largest values seen so far, ascending in run[0..k) (a small k):
 * most values fail the first compare, with run[0]. */
typedef struct { float *run; int64_t c, k; } largest;

static void keep(largest *l, float x) {
    int64_t j;
    if (l->c < l->k) {
        for (j = l->c++; j > 0 && l->run[j - 1] > x; j--) l->run[j] = l->run[j - 1];
        l->run[j] = x;
    } else if (x > l->run[0]) {
        for (j = 1; j < l->k && l->run[j] < x; j++) l->run[j - 1] = l->run[j];
        l->run[j - 1] = x;
    }
}

/* the k-th largest of v[0..n) (n >= k >= 1), v unchanged */
static float kth_largest_small(const float *v, int64_t n, int64_t k, float *run) {
    largest l = {run, 0, k};
    for (int64_t i = 0; i < n; i++) keep(&l, v[i]);
    return run[0];
}

#define SMALL_K 128  /* up to here kth_largest_small, beyond it quickselect */

typedef struct { double z; int32_t id; } zid;

/* the candidates' arrays, in one allocation with room for cap of each */
typedef struct { char *mem; int64_t cap; zid *kept; int32_t *ids; float *vals; } room;

static int make_room(room *r, int64_t need) {
    if (r->mem && need <= r->cap) return 1;
    char *mem = (char *)realloc(r->mem, (size_t)need * (sizeof(zid) + sizeof(int32_t) + sizeof(float)));
    if (!mem) return 0;
    r->mem = mem, r->cap = need;
    r->kept = (zid *)mem, r->ids = (int32_t *)(r->kept + need), r->vals = (float *)(r->ids + need);
    return 1;
}

static int cmp_zid(const void *a, const void *b) {  /* z descending, then id ascending */
    const zid *p = (const zid *)a, *q = (const zid *)b;
    if (p->z != q->z) return p->z < q->z ? 1 : -1;
    return (p->id > q->id) - (p->id < q->id);
}

static int cmp_id(const void *a, const void *b) {
    const zid *p = (const zid *)a, *q = (const zid *)b;
    return (p->id > q->id) - (p->id < q->id);
}

/* -- the full vocabulary (no top-k, top-p or min-p): sampling.py's _pick
 * for a q that keeps every token.  exp(z) of every token is needed once,
 * for q's normaliser and the tail's block masses; the head -- the tokens
 * within the widest of HEAD_NATS of the top that holds at most head_cap --
 * is scored token by token, the rest in blocks of TAIL_BLOCK ids, each
 * block one item with its mass and noise, opened only when it wins. */

#define TAIL_BLOCK 2048                     /* sampling.BLOCK */
static const uint64_t BLOCK_ID = 1ULL << 40;  /* sampling.BLOCK_ID */
static const double HEAD_NATS[] = {24.0, 16.0, 12.0, 8.0, 4.0, 0.0};
static const double TOP_P_WINDOWS[] = {4.0, 8.0, 16.0, 32.0};  /* dist._WINDOWS, then every token */

/* exp(y) for y <= 0 in float32 (Cephes' expf: 2^n * p(r), |error| < 2 ulp;
 * 0 below -87.3, where float32 underflows as numpy's does) */
#if defined(__SSE2__) || defined(_M_X64)
static __m128 exp4(__m128 y) {
    const __m128 lo = _mm_set1_ps(-87.33654f);
    __m128 under = _mm_cmplt_ps(y, lo);
    y = _mm_max_ps(y, lo);
    __m128 fx = _mm_mul_ps(y, _mm_set1_ps(1.44269504088896341f));
    __m128i n = _mm_cvtps_epi32(fx);  /* round to nearest */
    fx = _mm_cvtepi32_ps(n);
    __m128 r = _mm_sub_ps(y, _mm_mul_ps(fx, _mm_set1_ps(0.693359375f)));
    r = _mm_sub_ps(r, _mm_mul_ps(fx, _mm_set1_ps(-2.12194440e-4f)));
    __m128 p = _mm_set1_ps(1.9875691500E-4f);
    p = _mm_add_ps(_mm_mul_ps(p, r), _mm_set1_ps(1.3981999507E-3f));
    p = _mm_add_ps(_mm_mul_ps(p, r), _mm_set1_ps(8.3334519073E-3f));
    p = _mm_add_ps(_mm_mul_ps(p, r), _mm_set1_ps(4.1665795894E-2f));
    p = _mm_add_ps(_mm_mul_ps(p, r), _mm_set1_ps(1.6666665459E-1f));
    p = _mm_add_ps(_mm_mul_ps(p, r), _mm_set1_ps(5.0000001201E-1f));
    p = _mm_add_ps(_mm_mul_ps(_mm_mul_ps(p, r), r), _mm_add_ps(r, _mm_set1_ps(1.0f)));
    __m128i e = _mm_slli_epi32(_mm_add_epi32(n, _mm_set1_epi32(127)), 23);
    return _mm_andnot_ps(under, _mm_mul_ps(p, _mm_castsi128_ps(e)));
}
#endif

/* Per TAIL_BLOCK block, the mass of its tokens below `thr` (the tail; mass
 * may be NULL where only the total is wanted), and the mass of every token
 * (*total): exp((x - m) * inv_t) as float32, in float32 over 64 logits at
 * a time, then in double. */
static void tail_masses(const float *x, int64_t n, float m, float inv_t, float thr, double *mass, double *total) {
    double all = 0.0;
    int64_t nt = (n + TAIL_BLOCK - 1) / TAIL_BLOCK;
    for (int64_t b = 0; b < nt; b++) {
        int64_t lo = b * TAIL_BLOCK, hi = lo + TAIL_BLOCK < n ? lo + TAIL_BLOCK : n;
        double tail = 0.0;
        int64_t i = lo;
#if defined(__SSE2__) || defined(_M_X64)
        const __m128 vm = _mm_set1_ps(m), vt = _mm_set1_ps(inv_t), vthr = _mm_set1_ps(thr);
        for (; i + 64 <= hi; i += 64) {
            __m128 ta = _mm_setzero_ps(), aa = _mm_setzero_ps();
            for (int j = 0; j < 64; j += 4) {
                __m128 v = _mm_loadu_ps(x + i + j);
                __m128 e = exp4(_mm_mul_ps(_mm_sub_ps(v, vm), vt));
                aa = _mm_add_ps(aa, e);
                ta = _mm_add_ps(ta, _mm_and_ps(_mm_cmplt_ps(v, vthr), e));
            }
            float tv[4], av[4];
            _mm_storeu_ps(tv, ta), _mm_storeu_ps(av, aa);
            tail += (double)((tv[0] + tv[1]) + (tv[2] + tv[3]));
            all += (double)((av[0] + av[1]) + (av[2] + av[3]));
        }
#endif
        for (; i < hi; i++) {
            float e = expf((x[i] - m) * inv_t);
            all += e;
            if (x[i] < thr) tail += e;
        }
        if (mass) mass[b] = tail;
    }
    *total = all;
}

/* The seeded choice over the whole vocabulary (see above); -1 if out of memory. */
static int64_t full_vocab(const float *x, int64_t n, const float *bmax, int64_t nb, float m, double t,
                          uint64_t key, int64_t head_cap, room *r, double *log_z_out) {
    double md = (double)m;
    /* the head: the widest window that holds at most head_cap tokens */
    float thr = 0.0f;
    int64_t c = 0;
    for (int w = 0; w < 6; w++) {
        thr = (float)(md - HEAD_NATS[w] * t);
        c = count_above(x, n, bmax, nb, thr);
        if (c <= head_cap || HEAD_NATS[w] == 0.0) break;
    }
    if (!make_room(r, c)) return -1;  /* ties at the top may be wider than the room */
    above(x, n, bmax, nb, thr, r->ids, r->cap);
    int64_t nt = (n + TAIL_BLOCK - 1) / TAIL_BLOCK;
    double *mass = (double *)malloc((size_t)nt * sizeof(double));
    if (!mass) return -1;
    double total;
    tail_masses(x, n, m, (float)(1.0 / t), thr, mass, &total);
    double log_z = log(total);
    *log_z_out = log_z;
    /* Gumbel-max over the head's tokens, then the tail's blocks (their order in sampling.py) */
    double best = -INFINITY;
    int64_t item = -1;
    for (int64_t i = 0; i < c; i++) {
        double z = (double)x[r->ids[i]] / t - md / t;
        double s = (z - log_z) + gumbel(key, (uint64_t)r->ids[i]);
        if (s > best || item < 0) best = s, item = r->ids[i];
    }
    for (int64_t b = 0; b < nt; b++) {
        if (!(mass[b] > 0.0)) continue;
        double s = (log(mass[b]) - log_z) + gumbel(key, BLOCK_ID + (uint64_t)b);
        if (s > best) best = s, item = (int64_t)(BLOCK_ID + (uint64_t)b);
    }
    free(mass);
    if (item < (int64_t)BLOCK_ID) return item;
    int64_t b = item - (int64_t)BLOCK_ID;  /* the tail won: its tokens, with their own noise */
    int64_t lo = b * TAIL_BLOCK, hi = lo + TAIL_BLOCK < n ? lo + TAIL_BLOCK : n;
    int64_t token = -1;
    best = -INFINITY;
    for (int64_t i = lo; i < hi; i++) {
        if (x[i] >= thr) continue;  /* the head's */
        double s = ((double)x[i] / t - md / t) + gumbel(key, (uint64_t)i);
        if (s > best || token < 0) best = s, token = i;
    }
    return token;
}

/* `pick` (_pick.h says what it takes and returns) */
static int64_t pick(const float *x, int64_t n, const int64_t *tok, const settings *st, long long pos,
                    int want_conf, double *conf_out) {
    const double t = st->t, top_p = st->top_p, min_p = st->min_p;
    const long long top_k = st->top_k, head_cap = st->head_cap;
    const uint64_t seed = st->seed;
    int64_t nb = (n + BLOCK - 1) / BLOCK;
    /* block maxima and a copy; then the candidates (room for a few thousand,
       more where a row needs it) */
    float *bmax = (float *)malloc(2 * (size_t)nb * sizeof(float));
    room r = {0};
    int64_t room0 = head_cap > 4096 ? head_cap : 4096;
    if (!bmax || !make_room(&r, n < room0 ? n : room0)) {
        free(bmax);
        free(r.mem);
        return -2;
    }
    float *bcopy = bmax + nb;

    int64_t top = scan(x, n, bmax, nb);
    int64_t token = -1;
    double conf = NAN;
    if (top < 0) goto done;
    float m = x[top];
    if (t == 0.0) {
        token = top;
        if (want_conf) {
            float lo = m - 12.0f;
            double s = 0.0;
            for (int64_t b = 0; b < nb; b++) {
                if (!(bmax[b] >= lo)) continue;
                int64_t end = (b + 1) * BLOCK <= n ? (b + 1) * BLOCK : n;
                for (int64_t i = b * BLOCK; i < end; i++)
                    if (x[i] >= lo) s += (double)expf(x[i] - m);
            }
            conf = 1.0 / s;
        }
        goto done;
    }
    int top_k_on = top_k > 0 && top_k < n;
    if (!top_k_on && !tok && !(min_p > 0.0) && top_p >= 1.0) {  /* the full vocabulary */
        double log_z;
        token = full_vocab(x, n, bmax, nb, m, t, noise_key(seed, pos), head_cap, &r, &log_z);
        if (token < 0) goto done;
        if (want_conf) conf = exp(-log_z);
        goto done;
    }
    double md = (double)m;
    double floor_d = min_p > 0.0 ? md + t * log(min_p) : -INFINITY;
    double total_all = 0.0;  /* top-p's mass where top-k is off: every token's */
    int64_t c;
    if (top_k_on) {
        /* the k largest lie in the blocks whose maxima reach the k-th largest maximum */
        float bk = -INFINITY;
        if (nb > top_k && top_k <= SMALL_K) {
            bk = kth_largest_small(bmax, nb, top_k, bcopy);
        } else if (nb > top_k) {
            memcpy(bcopy, bmax, (size_t)nb * sizeof(float));
            bk = kth_largest(bcopy, nb, top_k);
        }
        c = above(x, n, bmax, nb, bk, r.ids, r.cap);
        if (c > r.cap) {  /* a flat row */
            if (!make_room(&r, c)) goto done;
            above(x, n, bmax, nb, bk, r.ids, r.cap);
        }
        for (int64_t i = 0; i < c; i++) r.vals[i] = x[r.ids[i]];
        float kth = top_k <= SMALL_K ? kth_largest_small(r.vals, c, top_k, (float *)r.kept)
                                     : kth_largest(r.vals, c, top_k);
        int64_t j = 0;
        for (int64_t i = 0; i < c; i++)
            if (x[r.ids[i]] >= kth) r.ids[j++] = r.ids[i];
        c = j;
    } else if (tok) {  /* candidates, no more than top-k: all of them */
        if (!make_room(&r, n)) goto done;
        for (int64_t i = 0; i < n; i++) r.ids[i] = (int32_t)i;
        c = n;
    } else if (top_p < 1.0) {  /* a whole row, top-p over every token: the narrowest window that holds its mass */
        tail_masses(x, n, m, (float)(1.0 / t), -INFINITY, NULL, &total_all);
        for (int w = 0; w < 5; w++) {
            float thr = w < 4 ? (float)(md - TOP_P_WINDOWS[w]) : -INFINITY;
            c = count_above(x, n, bmax, nb, thr);
            if (!make_room(&r, c)) goto done;
            above(x, n, bmax, nb, thr, r.ids, r.cap);
            double in = 0.0;
            for (int64_t i = 0; i < c; i++) in += exp((double)x[r.ids[i]] / t - md / t);
            if (in >= top_p * total_all) break;
        }
    } else {  /* a whole row, min-p alone: the tokens above its floor (q's set) */
        c = above(x, n, bmax, nb, (float)floor_d, r.ids, r.cap);
        if (c > r.cap) goto done;  /* wider than the head: the room holds head_cap at least */
    }
    int64_t nk = 0;
    zid *kept = r.kept;
    for (int64_t i = 0; i < c; i++) {
        kept[nk].z = (double)x[r.ids[i]] / t - md / t;
        kept[nk].id = r.ids[i];
        nk++;
    }
    if (top_p < 1.0) {  /* the mass counted over what top-k kept (ids ascending), or every token */
        double total = total_all;
        if (top_k_on || tok) {
            total = 0.0;
            for (int64_t i = 0; i < nk; i++) total += exp(kept[i].z);
        }
        qsort(kept, (size_t)nk, sizeof(zid), cmp_zid);
        double cum = 0.0;
        int64_t j = 0;
        for (int64_t i = 0; i < nk; i++) {
            double p = exp(kept[i].z) / total;
            cum += p;
            if (cum - p < top_p) kept[j++] = kept[i];
        }
        nk = j;
    }
    if (min_p > 0.0) {
        float fl = (float)floor_d;
        int64_t j = 0;
        for (int64_t i = 0; i < nk; i++)
            if (x[kept[i].id] >= fl) kept[j++] = kept[i];
        nk = j;
    }
    if (nk < 1 || nk > head_cap) goto done;  /* wider than the head: numpy scores it in blocks */
    if (top_p < 1.0)  /* back to ascending ids: the first of equal scores is the lowest id, as numpy's */
        qsort(kept, (size_t)nk, sizeof(zid), cmp_id);
    double zmax = kept[0].z;
    for (int64_t i = 1; i < nk; i++) zmax = kept[i].z > zmax ? kept[i].z : zmax;
    double s = 0.0;
    for (int64_t i = 0; i < nk; i++) s += exp(kept[i].z - zmax);
    double log_z = zmax + log(s);
    uint64_t key = noise_key(seed, pos);
    double best = -INFINITY;
    for (int64_t i = 0; i < nk; i++) {
        double score = gumbel(key, (uint64_t)(tok ? tok[kept[i].id] : kept[i].id)) + (kept[i].z - log_z);
        if (score > best || token < 0) { best = score; token = kept[i].id; }
    }
    if (want_conf) conf = exp(-log_z);
done:
    free(bmax);
    free(r.mem);
    if (tok && token >= 0) token = tok[token];
    *conf_out = conf;
    return token;
}

static int settings_from(PyObject *const *args, settings *st) {
    st->t = PyFloat_AsDouble(args[0]);
    st->top_k = PyLong_AsLongLong(args[1]);
    st->top_p = PyFloat_AsDouble(args[2]);
    st->min_p = PyFloat_AsDouble(args[3]);
    st->seed = PyLong_AsUnsignedLongLong(args[4]);
    st->head_cap = PyLong_AsLongLong(args[6]);
    return PyErr_Occurred() ? -1 : 0;
}

/* a float32 buffer: 0, or -1 with TypeError set and nothing held */
static int float_rows(PyObject *obj, Py_buffer *view, int ndim) {
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return -1;
    const char *f = view->format;  /* "f", or numpy's "<f" (native order only) */
    if (f && (f[0] == '<' || f[0] == '=' || f[0] == '@') && PY_LITTLE_ENDIAN) f++;
    if (view->itemsize != 4 || !f || strcmp(f, "f") != 0 || view->ndim != ndim || view->len < 4) {
        PyErr_Format(PyExc_TypeError, "needs a non-empty %s of float32", ndim == 1 ? "row" : "2-D array");
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

/* choose(row, temperature, top_k, top_p, min_p, seed, pos, head_cap, confidence, ids)
 *   -> (token, confidence) or None
 * row: a C-contiguous float32 buffer; seed: already reduced mod 2^64.
 * ids: None for a whole row (position i is token i), or an int64 buffer
 * naming the token at each position of a row of candidates (llama.cpp's
 * top-k), ascending, so that both give the same q to the bit.
 * Greedy (temperature 0): the argmax, and with `confidence` sampling.decide's
 * signal (1 / sum of exp(x - m) over x >= m - 12).  Else the seeded choice
 * and q's top probability (with `confidence`; NaN without). */
static PyObject *choose(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 10) {
        PyErr_SetString(PyExc_TypeError, "choose takes 10 arguments");
        return NULL;
    }
    settings st;
    if (settings_from(args + 1, &st) < 0) return NULL;
    long long pos = PyLong_AsLongLong(args[6]);
    int want_conf = PyObject_IsTrue(args[8]);
    if (PyErr_Occurred()) return NULL;
    Py_buffer view;
    if (float_rows(args[0], &view, 1) < 0) return NULL;
    int64_t n = view.len / (Py_ssize_t)sizeof(float);
    Py_buffer idv = {0};
    const int64_t *tok = NULL;
    if (args[9] != Py_None) {
        if (PyObject_GetBuffer(args[9], &idv, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
            PyBuffer_Release(&view);
            return NULL;
        }
        const char *g = idv.format;
        if (g && (g[0] == '<' || g[0] == '=' || g[0] == '@') && PY_LITTLE_ENDIAN) g++;
        if (idv.itemsize != 8 || !g || (strcmp(g, "q") != 0 && strcmp(g, "l") != 0)
                || idv.len / 8 != n) {
            PyErr_SetString(PyExc_TypeError, "choose needs int64 ids, one for each value");
            PyBuffer_Release(&idv);
            PyBuffer_Release(&view);
            return NULL;
        }
        tok = (const int64_t *)idv.buf;
    }
    double conf = NAN;
    int64_t token = pick((const float *)view.buf, n, tok, &st, pos, want_conf, &conf);
    if (tok) PyBuffer_Release(&idv);
    PyBuffer_Release(&view);
    if (token == -2) return PyErr_NoMemory();
    if (token < 0) Py_RETURN_NONE;
    return Py_BuildValue("(Ld)", (long long)token, conf);
}

/* The coupled rule's walk (verify.verify_choices) over `rows` rows of n
 * logits: row i's choice at output position pos0 + i into got[i], for i =
 * 0, 1, ... while the draft's token i equals it, and the first that
 * differs (or the row after the draft).  Returns how many it chose; fewer
 * where a row is numpy's to decide (*status is -1 then, -2 when out of
 * memory; else 0).  With threads > 1, rows are claimed in order by each thread
 * (the rows are read from memory, not computed: on a memory-bound host two
 * cores read them nearly twice as fast), and none after a known stop. */
static int64_t walk(const float *x, int64_t n, int64_t rows, const long long *draft, int64_t k,
                    const settings *st, long long pos0, int threads, int64_t *got, int64_t *status) {
    for (int64_t i = 0; i < rows; i++) got[i] = -3;
#ifdef ROWS_IN_THREADS
    if (threads > 1 && rows > 1) {
        int64_t next = 0, stop = rows;  /* the next row to claim; rows from `stop` on are not read */
#pragma omp parallel num_threads(threads)
        for (;;) {
            int64_t i = __atomic_fetch_add(&next, 1, __ATOMIC_RELAXED);
            if (i >= __atomic_load_n(&stop, __ATOMIC_ACQUIRE)) break;
            double conf;
            int64_t token = pick(x + i * n, n, NULL, st, pos0 + i, 0, &conf);
            got[i] = token;
            if (token < 0 || i >= k || draft[i] != token) {  /* the walk ends here at the latest */
                int64_t cur = __atomic_load_n(&stop, __ATOMIC_ACQUIRE);
                while (i + 1 < cur && !__atomic_compare_exchange_n(&stop, &cur, i + 1, 0, __ATOMIC_ACQ_REL,
                                                                    __ATOMIC_ACQUIRE)) {}
            }
        }
        /* every row before the final stop was claimed and chosen */
    } else
#endif
    {
        (void)threads;
        for (int64_t i = 0; i < rows; i++) {
            double conf;
            got[i] = pick(x + i * n, n, NULL, st, pos0 + i, 0, &conf);
            if (got[i] < 0 || i >= k || draft[i] != got[i]) break;
        }
    }
    int64_t count = 0;
    *status = 0;
    for (int64_t i = 0; i < rows; i++) {
        if (got[i] < 0) {
            *status = got[i];
            break;
        }
        count++;
        if (i >= k || draft[i] != got[i]) break;
    }
    return count;
}

/* choose_rows(rows, draft, temperature, top_k, top_p, min_p, seed, pos0, head_cap, threads)
 *   -> [token, ...]
 * walk() over a verify batch: its choices in order, fewer where a row is
 * numpy's to decide (the caller chooses the rest). */
static PyObject *choose_rows(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 10) {
        PyErr_SetString(PyExc_TypeError, "choose_rows takes 10 arguments");
        return NULL;
    }
    PyObject *sargs[7] = {args[2], args[3], args[4], args[5], args[6], args[7], args[8]};
    settings st;
    if (settings_from(sargs, &st) < 0) return NULL;
    long long pos0 = PyLong_AsLongLong(args[7]);
    long threads = PyLong_AsLong(args[9]);
    if (PyErr_Occurred()) return NULL;
    PyObject *draft = PySequence_Fast(args[1], "choose_rows needs a sequence of draft tokens");
    if (!draft) return NULL;
    Py_ssize_t k = PySequence_Fast_GET_SIZE(draft);
    Py_buffer view;
    if (float_rows(args[0], &view, 2) < 0) {
        Py_DECREF(draft);
        return NULL;
    }
    int64_t n = view.shape[1], rows = view.shape[0] < k + 1 ? view.shape[0] : k + 1;
    long long *dr = (long long *)malloc(((size_t)k + 1) * sizeof(long long));
    int64_t *got = (int64_t *)malloc(((size_t)rows + 1) * sizeof(int64_t));
    PyObject *out = NULL;
    if (!dr || !got) {
        PyErr_NoMemory();
        goto end;
    }
    for (Py_ssize_t i = 0; i < k; i++) {
        dr[i] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(draft, i));
        if (dr[i] == -1 && PyErr_Occurred()) goto end;
    }
    int64_t status;
    int64_t count = walk((const float *)view.buf, n, rows, dr, k, &st, pos0,
                         threads < 1 ? 1 : (int)threads, got, &status);
    if (status == -2) {
        PyErr_NoMemory();
        goto end;
    }
    out = PyList_New(count);
    for (int64_t i = 0; out && i < count; i++) {
        PyObject *v = PyLong_FromLongLong(got[i]);
        if (!v) Py_CLEAR(out);
        else PyList_SET_ITEM(out, i, v);
    }
end:
    free(dr);
    free(got);
    PyBuffer_Release(&view);
    Py_DECREF(draft);
    return out;
}

static PyMethodDef methods[] = {
    {"choose", (PyCFunction)(void (*)(void))choose, METH_FASTCALL,
     "choose(row, temperature, top_k, top_p, min_p, seed, pos, head_cap, confidence, ids) -> (token, conf) or None"},
    {"choose_rows", (PyCFunction)(void (*)(void))choose_rows, METH_FASTCALL,
     "choose_rows(rows, draft, temperature, top_k, top_p, min_p, seed, pos0, head_cap, threads) -> [token, ...]"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fastpick", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__fastpick(void) {
    PyObject *m = PyModule_Create(&module);
#ifdef ROWS_IN_THREADS
    const int threads = 1;
#else
    const int threads = 0;
#endif
    if (m && PyModule_AddIntConstant(m, "OPENMP", threads) < 0) Py_CLEAR(m);  /* choose_rows in threads? */
    static pick_api api = {PICK_API_VERSION, pick};  /* for llama/_decodepick.c */
    PyObject *cap = m ? PyCapsule_New(&api, PICK_CAPSULE, NULL) : NULL;
    if (m && (!cap || PyModule_AddObject(m, "pick_api", cap) < 0)) {
        Py_XDECREF(cap);
        Py_CLEAR(m);
    }
    return m;
}
