/* What the compiled choice (core/_fastpick.c) hands other extensions: its
 * per-row core `pick`, through a capsule, so that llama/_decodepick.c can
 * choose a token right after llama_decode without a copy of it.  The core
 * stays in core/ (no llama.cpp there); the call into llama.cpp lives in
 * llama/. */
#ifndef SPEC_CLI_PICK_H
#define SPEC_CLI_PICK_H
#include <stdint.h>

/* What a choice is made under: sampling.SamplingConfig, the seed (reduced
 * mod 2^64) and sampling.HEAD_CAP. */
typedef struct { double t; long long top_k; double top_p, min_p; uint64_t seed; long long head_cap; } settings;

/* The token at output position `pos` from row x (n values; tok: the token
 * id at each position, or NULL where the position is the id), and with
 * want_conf decide's confidence in *conf; -1 where numpy's path decides
 * (a NaN, a q wider than the head, no memory for the candidates), -2 when
 * out of memory from the start. */
typedef int64_t (*pick_fn)(const float *x, int64_t n, const int64_t *tok, const settings *st, long long pos,
                           int want_conf, double *conf_out);

typedef struct { int version; pick_fn pick; } pick_api;

#define PICK_API_VERSION 1
#define PICK_CAPSULE "spec_cli.core._fastpick.pick_api"
#endif
