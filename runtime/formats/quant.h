/* quant.h — ggml tensor types: block layouts, the type table, and dequantization to fp32.
 *
 * Layouts follow the GGUF/ggml spec (little-endian). Each block type has a static_assert on its
 * size; the type table drives both file validation (block size, bytes per block) and
 * dequantization (to_float, NULL where this project cannot decode the type). */
#ifndef DS_QUANT_H
#define DS_QUANT_H

#include <stddef.h>
#include <stdint.h>

/* A weight matrix y = W x with W [rows = out features][cols = in features], row-major in its
 * storage type (ggml type id; F32 for safetensors models). */
typedef struct {
    uint32_t type;
    int rows, cols;
    size_t row_bytes;
    const void *data; /* the file's bytes (backends keep their own copies, keyed by this address) */
} qmat;

enum ggml_type {
    GGML_F32 = 0, GGML_F16 = 1, GGML_Q4_0 = 2, GGML_Q4_1 = 3, GGML_Q5_0 = 6, GGML_Q5_1 = 7,
    GGML_Q8_0 = 8, GGML_Q8_1 = 9, GGML_Q2_K = 10, GGML_Q3_K = 11, GGML_Q4_K = 12, GGML_Q5_K = 13,
    GGML_Q6_K = 14, GGML_Q8_K = 15, GGML_I8 = 24, GGML_I16 = 25, GGML_I32 = 26, GGML_I64 = 27,
    GGML_F64 = 28, GGML_BF16 = 30, GGML_TYPE_LIMIT = 64
};

typedef uint16_t ds_f16;
typedef uint16_t ds_bf16;

#define QK4_0 32
#define QK4_1 32
#define QK8_0 32
#define QK_K 256

typedef struct { ds_f16 d; uint8_t qs[QK4_0 / 2]; } block_q4_0;
typedef struct { ds_f16 d, m; uint8_t qs[QK4_1 / 2]; } block_q4_1;
typedef struct { ds_f16 d; uint8_t qh[4]; uint8_t qs[16]; } block_q5_0;
typedef struct { ds_f16 d; int8_t qs[QK8_0]; } block_q8_0;
typedef struct { ds_f16 d, dmin; uint8_t scales[12]; uint8_t qs[QK_K / 2]; } block_q4_K;
typedef struct { uint8_t ql[QK_K / 2]; uint8_t qh[QK_K / 4]; int8_t scales[QK_K / 16]; ds_f16 d; } block_q6_K;

_Static_assert(sizeof(block_q4_0) == 18, "block_q4_0 size");
_Static_assert(sizeof(block_q4_1) == 20, "block_q4_1 size");
_Static_assert(sizeof(block_q5_0) == 22, "block_q5_0 size");
_Static_assert(sizeof(block_q8_0) == 34, "block_q8_0 size");
_Static_assert(sizeof(block_q4_K) == 144, "block_q4_K size");
_Static_assert(sizeof(block_q6_K) == 210, "block_q6_K size");

/* Dequantize n elements (a multiple of the block size) from src to dst. */
typedef void (*to_float_fn)(const void *src, float *dst, int64_t n);

typedef struct {
    const char *name;
    int blck;          /* elements per block; 0 = not a valid type id */
    int size;          /* bytes per block */
    to_float_fn to_float;
} ggml_type_info;

/* Type info for an id, or NULL if the id is not a known ggml type. */
const ggml_type_info *ggml_type_get(uint32_t type);
const char *ggml_type_name(uint32_t type);

float ds_f16_to_f32(ds_f16 h);
ds_f16 ds_f32_to_f16(float f);      /* round to nearest even */
float ds_bf16_to_f32(ds_bf16 h);
ds_bf16 ds_f32_to_bf16(float f);    /* round to nearest even */

void quantize_q4_1(const float *x, block_q4_1 *b, int64_t n);
/* sub-block j (0..7) of a Q4_K super-block: its 6-bit scale and min from the 12 packed bytes */
void q4k_scale_min(int j, const uint8_t *scales, uint8_t *sc, uint8_t *mn);
void quantize_q8_0(const float *x, block_q8_0 *b, int64_t n);
/* the real pair's types, as simply (no error search): synthetic models of every type the runtime reads */
void quantize_q5_0(const float *x, block_q5_0 *b, int64_t n);
void quantize_q4_k(const float *x, block_q4_K *b, int64_t n);
void quantize_q6_k(const float *x, block_q6_K *b, int64_t n);

/* Scalar reference decoders (the vectorised ones in the table must agree bit for bit). */
void dequant_q4_1_ref(const void *src, float *dst, int64_t n);
void dequant_q8_0_ref(const void *src, float *dst, int64_t n);

#endif
