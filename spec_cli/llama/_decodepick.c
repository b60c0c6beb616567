/* One drafted token in one call: llama_decode, then the choice from its
 * logits row by the compiled kernel's core (core/_fastpick.c's `pick`,
 * reached through its capsule, _pick.h), with no Python between them:
 * right after a decode the host's caches hold the weights and each Python
 * step costs several us, ~0.1 ms a drafted token.
 *
 * It writes the one token into the llama_batch that llama-cpp-python 0.3.36
 * binds (the struct below has its fields in its order) and calls the
 * functions at the addresses it is given (llama.cpp's own, llama/lib.py),
 * so it links to nothing but Python.  Import fails where the kernel did not
 * build: llama/model.py then decodes and chooses in two steps. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#ifdef _WIN32
#include <windows.h>
#endif
#include "_pick.h"

static const pick_api *api;

typedef struct {
    int32_t n_tokens;
    int32_t *token;
    float *embd;
    int32_t *pos;
    int32_t *n_seq_id;
    int32_t **seq_id;
    int8_t *logits;
} llama_batch_t;
typedef int32_t (*decode_fn)(void *ctx, llama_batch_t batch);
typedef float *(*logits_fn)(void *ctx);

static double now(void) {
#ifdef _WIN32
    LARGE_INTEGER f, c;
    QueryPerformanceFrequency(&f);
    QueryPerformanceCounter(&c);
    return (double)c.QuadPart / (double)f.QuadPart;
#else
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
#endif
}

/* decode_choose(decode, get_logits, ctx, batch, n_vocab, token, pos, temperature, top_k, top_p,
 *               min_p, seed, out_pos, head_cap, confidence) -> (rc, seconds, token, conf)
 * Append `token` at KV position `pos` of the sequence the batch's first
 * slot names (its seq_id is the caller's to set), by llama_decode (the
 * function at address `decode`, the context at `ctx`, the llama_batch at
 * `batch`), the GIL released meanwhile; then choose from its logits row
 * (llama_get_logits at `get_logits`) as sampling.choose does, at output
 * position out_pos.  rc: llama_decode's (nothing chosen unless 0);
 * seconds: the time inside llama.cpp; token: -1 where numpy's path decides
 * (the row is in llama.cpp's buffer), -2 when out of memory. */
static PyObject *decode_choose(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 15) {
        PyErr_SetString(PyExc_TypeError, "decode_choose takes 15 arguments");
        return NULL;
    }
    void *addr[4];
    for (int i = 0; i < 4; i++) addr[i] = PyLong_AsVoidPtr(args[i]);
    long long n = PyLong_AsLongLong(args[4]), token = PyLong_AsLongLong(args[5]);
    long long pos = PyLong_AsLongLong(args[6]), out_pos = PyLong_AsLongLong(args[12]);
    settings st;
    st.t = PyFloat_AsDouble(args[7]);
    st.top_k = PyLong_AsLongLong(args[8]);
    st.top_p = PyFloat_AsDouble(args[9]);
    st.min_p = PyFloat_AsDouble(args[10]);
    st.seed = PyLong_AsUnsignedLongLong(args[11]);
    st.head_cap = PyLong_AsLongLong(args[13]);
    int want_conf = PyObject_IsTrue(args[14]);
    if (PyErr_Occurred()) return NULL;
    if (!addr[0] || !addr[1] || !addr[2] || !addr[3] || n < 1) {
        PyErr_SetString(PyExc_ValueError, "decode_choose needs llama.cpp's functions, context and batch");
        return NULL;
    }
    decode_fn decode;
    logits_fn get_logits;
    memcpy(&decode, &addr[0], sizeof decode);  /* object to function pointer, as dlsym's users do */
    memcpy(&get_logits, &addr[1], sizeof get_logits);
    llama_batch_t *b = (llama_batch_t *)addr[3];
    b->n_tokens = 1;
    b->token[0] = (int32_t)token;
    b->pos[0] = (int32_t)pos;
    b->n_seq_id[0] = 1;
    b->logits[0] = 1;
    int32_t rc;
    const float *row = NULL;
    double t0 = now(), spent;
    Py_BEGIN_ALLOW_THREADS
    rc = decode(addr[2], *b);
    if (rc == 0) row = get_logits(addr[2]);
    Py_END_ALLOW_THREADS
    spent = now() - t0;
    long long chosen = -1;
    double conf = NAN;
    if (rc == 0 && row) chosen = api->pick(row, n, NULL, &st, out_pos, want_conf, &conf);
    return Py_BuildValue("(idLd)", (int)rc, spent, chosen, conf);
}

static PyMethodDef methods[] = {
    {"decode_choose", (PyCFunction)(void (*)(void))decode_choose, METH_FASTCALL,
     "decode_choose(decode, get_logits, ctx, batch, n_vocab, token, pos, temperature, top_k, top_p, min_p, "
     "seed, out_pos, head_cap, confidence) -> (rc, seconds, token, conf)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_decodepick", NULL, -1, methods, NULL, NULL, NULL,
                                    NULL};

PyMODINIT_FUNC PyInit__decodepick(void) {
    api = (const pick_api *)PyCapsule_Import(PICK_CAPSULE, 0);
    if (!api) return NULL;
    if (api->version != PICK_API_VERSION) {
        PyErr_SetString(PyExc_ImportError, "spec_cli.core._fastpick is of another build");
        return NULL;
    }
    return PyModule_Create(&module);
}
