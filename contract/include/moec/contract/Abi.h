/*===- Abi.h - what the compiler and the runtime agree on -----------------===*
 *
 * The one header both sides of the ABI read: the passes and the step-program
 * emitter (compiler side, with MLIR) and the runtime (no MLIR, LLVM or
 * Halide). It holds the enums that cross from the compiler to the runtime
 * as integers, and the exact wire sizes of the codecs, so that the cost
 * model, the emitted analytical volumes and the bytes the runtime sends are
 * computed by one formula. Plain C: static inline functions only, no
 * includes beyond <stdint.h> (contract/README.md).
 *
 * The dialect's enums (dialect/include/moe/Dialect/MoE/MoEAttributes.td) use
 * the same values; codegen/lib/StepProgram.cpp checks that at compile time.
 *
 *===----------------------------------------------------------------------===*/

#ifndef MOEC_CONTRACT_ABI_H
#define MOEC_CONTRACT_ABI_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The layout of `moert_program` and `moert_context` (moert/Program.h). A
 * step program records the version it was emitted for; the trainer refuses
 * another. */
#define MOERT_ABI_VERSION 17

/* Parameter initialisers (moe.param's init kind). */
enum moert_init {
  MOERT_INIT_ZEROS = 0,
  MOERT_INIT_ONES = 1,
  MOERT_INIT_NORMAL = 2,
  MOERT_INIT_UNIFORM = 3
};

/* Codecs of compressed collectives (#moe.codec's kind). */
enum moert_codec_kind {
  MOERT_CODEC_FP16 = 0,
  MOERT_CODEC_BF16 = 1,
  MOERT_CODEC_INT8 = 2,
  MOERT_CODEC_TOPK = 3,
  MOERT_CODEC_SIGN = 4,
  MOERT_CODEC_POWERSGD = 5
};

/* FFN activations (the `activation` of moe.ffn and moe.expert_ffn). */
enum moert_activation {
  MOERT_ACTIVATION_SWIGLU = 0,
  MOERT_ACTIVATION_GELU = 1,
  MOERT_ACTIVATION_RELU = 2
};

/* Learning-rate schedules (moe.lr_schedule's `schedule`). */
enum moert_lr_schedule { MOERT_LR_COSINE = 0, MOERT_LR_LINEAR = 1, MOERT_LR_CONSTANT = 2 };

/* A schedule of `total` steps with `warmup` warm-up steps fitted to a run
 * of `steps` (the training binary's default, and moe-ref-train's): the
 * decay ends at the run's last step and the warm-up keeps its share,
 * rounded to the nearest step, at least 1 if it had any. Returns the
 * fitted warm-up; the fitted total is `steps`. */
static inline int64_t moert_fit_warmup(int64_t warmup, int64_t total, int64_t steps) {
  if (warmup <= 0 || total <= 0 || steps <= 0)
    return 0;
  /* In double: exact below 2^53 (the schedules' range), no overflow. */
  int64_t fitted = (int64_t)((double)warmup * (double)steps / (double)total + 0.5);
  if (fitted < 1)
    fitted = 1;
  return fitted < steps ? fitted : steps;
}

/* Grid axes of a collective's group, as a bit mask. */
enum moert_axis { MOERT_AXIS_DP = 1, MOERT_AXIS_EP = 2, MOERT_AXIS_TP = 4 };

/* Buffer-plan arenas of a launch's results (moe.launch `buffers`). */
enum moert_arena { MOERT_ARENA_ACTIVATIONS = 0, MOERT_ARENA_GRADIENTS = 1 };

/* top-k: the number of (index, value) pairs sent for n elements. */
static inline int64_t moert_topk_count(double ratio, int64_t n) {
  int64_t k = (int64_t)(ratio * (double)n); /* floor for ratio, n >= 0 */
  if (k < 1)
    k = 1;
  return k < n ? k : n;
}

/* PowerSGD: the rank used for a [rows, cols] matrix. */
static inline int64_t moert_powersgd_rank(int64_t rank, int64_t rows, int64_t cols) {
  int64_t r = rank;
  if (rows < r)
    r = rows;
  if (cols < r)
    r = cols;
  return r < 1 ? 1 : r;
}

/* The exact bytes one encoding of `n` floats takes (PowerSGD: the factors
 * of a [rows, cols] matrix, rows * cols = n). */
static inline int64_t moert_codec_encoded_bytes(int kind, int64_t block_size, double ratio,
                                                int64_t rank, int64_t n, int64_t rows,
                                                int64_t cols) {
  switch (kind) {
  case MOERT_CODEC_FP16:
  case MOERT_CODEC_BF16:
    return 2 * n;
  case MOERT_CODEC_INT8: {
    int64_t block = block_size < 1 ? 1 : block_size;
    return n + 4 * ((n + block - 1) / block);
  }
  case MOERT_CODEC_TOPK:
    return 8 * moert_topk_count(ratio, n);
  case MOERT_CODEC_SIGN:
    return 4 + (n + 7) / 8;
  case MOERT_CODEC_POWERSGD:
    return 4 * moert_powersgd_rank(rank, rows, cols) * (rows + cols);
  }
  return 0;
}

/* The bytes one member of a group of `p` sends in an uncompressed ring
 * all-reduce of `n` floats: 2 (p - 1) / p of the buffer. */
static inline int64_t moert_ring_all_reduce_bytes(int64_t n, int64_t p) {
  return p > 1 ? 2 * (p - 1) * n * 4 / p : 0;
}

/* The bytes one member sends in a compressed all-reduce of `n` floats
 * (runtime/lib/StepComm.cpp): fp16, bf16 and int8 an all-to-all of encoded
 * chunks and an all-gather of the encoded sums; topk and sign an all-gather
 * of the encoding; powersgd ring all-reduces of P [rows, r] and Q [cols, r]. */
static inline int64_t moert_codec_all_reduce_bytes(int kind, int64_t block_size, double ratio,
                                                   int64_t rank, int64_t n, int64_t rows,
                                                   int64_t cols, int64_t p) {
  if (p <= 1)
    return 0;
  switch (kind) {
  case MOERT_CODEC_FP16:
  case MOERT_CODEC_BF16:
  case MOERT_CODEC_INT8:
    return 2 * (p - 1) *
           moert_codec_encoded_bytes(kind, block_size, ratio, rank, (n + p - 1) / p, 0, 0);
  case MOERT_CODEC_TOPK:
  case MOERT_CODEC_SIGN:
    return (p - 1) * moert_codec_encoded_bytes(kind, block_size, ratio, rank, n, 0, 0);
  case MOERT_CODEC_POWERSGD: {
    int64_t r = moert_powersgd_rank(rank, rows, cols);
    return 2 * (p - 1) * rows * r * 4 / p + 2 * (p - 1) * cols * r * 4 / p;
  }
  }
  return 0;
}

/* The bytes of `n` floats on the wire of an all-to-all with an optional
 * payload codec (kind < 0: raw f32; else fp16, bf16 or int8). */
static inline int64_t moert_all_to_all_wire_bytes(int kind, int64_t block_size, int64_t n) {
  return kind < 0 ? 4 * n : moert_codec_encoded_bytes(kind, block_size, 0, 0, n, 0, 0);
}

#ifdef __cplusplus
}
#endif

#endif /* MOEC_CONTRACT_ABI_H */
