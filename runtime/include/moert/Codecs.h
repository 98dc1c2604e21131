//===- Codecs.h - compression of collective payloads ------------*- C++ -*-===//
//
// The codecs of compressed collectives (issue 7): each turns a float tensor
// into bytes and back, with an exact encoded size. Lossy codecs that drop
// information (top-k, 1-bit sign, PowerSGD) keep an error-feedback residual
// per tensor and rank: what was not sent is added to the next step's input,
// so nothing is lost over time (as in DGC, 1-bit Adam and PowerSGD).
//
//   fp16, bf16   2 bytes per element (round to nearest even)
//   int8         1 byte per element + one f32 scale per block of
//                `blockSize` elements (scale = max |x| / 127)
//   topk         k = max(1, floor(ratio * n)) (int32 index, f32 value) pairs
//   sign         1 bit per element + one f32 scale (mean |x|)
//   powersgd     rank r factors P [rows, r] and Q [cols, r] in f32; Q is
//                warm-started from the previous step
//
// Plain C++ (no MLIR, LLVM or Halide), part of libmoert.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_CODECS_H
#define MOERT_CODECS_H

#include "moert/Comm.h"
#include "moert/Program.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace moert {

/// The values of enum moert_codec_kind (moec/contract/Abi.h).
enum class CodecKind {
  FP16 = MOERT_CODEC_FP16,
  BF16 = MOERT_CODEC_BF16,
  Int8 = MOERT_CODEC_INT8,
  TopK = MOERT_CODEC_TOPK,
  Sign = MOERT_CODEC_SIGN,
  PowerSGD = MOERT_CODEC_POWERSGD
};

struct CodecSpec {
  CodecKind kind = CodecKind::FP16;
  int64_t blockSize = 256;   ///< int8: elements per scale
  double ratio = 0.01;       ///< topk: fraction of elements sent
  int64_t rank = 4;          ///< powersgd: rank of the factors
  bool errorFeedback = true; ///< topk, sign, powersgd: keep a residual
};

/// Parses "fp16", "bf16", "int8[:block]", "topk[:ratio]", "sign",
/// "powersgd[:rank]"; false with `error` on anything else.
bool parseCodec(const std::string &text, CodecSpec &spec, std::string &error);

/// The exact bytes `encode` produces for a tensor of `n` elements (PowerSGD:
/// a [rows, cols] matrix, rows * cols = n).
int64_t encodedBytes(const CodecSpec &spec, int64_t n, int64_t rows = 0, int64_t cols = 0);

/// The state one tensor's codec keeps on one rank across steps.
struct CodecState {
  std::vector<float> residual;           ///< error feedback: input not yet sent
  std::vector<float> q;                  ///< powersgd: the warm-started right factor
  uint64_t seed = 0x9e3779b97f4a7c15ull; ///< powersgd: initial Q
};

/// A step context's codec states by site (its compressed all-reduces in
/// program order); created on first use (runtime/lib/StepComm.cpp).
using CodecStates = std::map<int, CodecState>;
CodecStates &codecStates(moert_context *ctx);

/// Encodes `n` floats (with the residual of `state` added when the codec
/// keeps one, and the new residual stored) into `out`, which gets exactly
/// encodedBytes(...) bytes. PowerSGD needs rows * cols = n.
void encode(const CodecSpec &spec, const float *data, int64_t n, std::vector<uint8_t> &out,
            CodecState &state, int64_t rows = 0, int64_t cols = 0);

/// Decodes what `encode` wrote into `n` floats.
void decode(const CodecSpec &spec, const uint8_t *bytes, int64_t n, float *out, int64_t rows = 0,
            int64_t cols = 0);

/// encode and decode between buffers in either memory space (moert/Comm.h's
/// moert_buffer): the floats (n = their bytes / 4) and the encoded bytes
/// (exactly encodedBytes(...)) may each be on the host or on a device. The
/// codecs run on the host: a device buffer is staged through host memory as
/// the host communicators stage it (runtime/comm/HostStaging.h), the output
/// copied back to the device. False with `error` on a size that does not
/// fit or a failed copy.
bool encodeBuffer(const CodecSpec &spec, const moert_buffer &data, const moert_buffer &out,
                  CodecState &state, std::string &error, int64_t rows = 0, int64_t cols = 0);
bool decodeBuffer(const CodecSpec &spec, const moert_buffer &bytes, const moert_buffer &out,
                  std::string &error, int64_t rows = 0, int64_t cols = 0);

/// `data` plus the residual of `state` when the codec keeps one (created at
/// zero on first use).
std::vector<float> withResidual(const CodecSpec &spec, const float *data, int64_t n,
                                CodecState &state);

/// PowerSGD's pieces, shared with the distributed all-reduce: the rank used
/// for a [rows, cols] matrix, the right factor Q [cols, r] (kept, or a
/// seeded start the same on every rank), P = M Q and Q = M^T P.
int64_t powerRank(const CodecSpec &spec, int64_t rows, int64_t cols);
void powerStart(CodecState &state, int64_t cols, int64_t r);
std::vector<float> powerLeft(const std::vector<float> &m, const std::vector<float> &q, int64_t rows,
                             int64_t cols, int64_t r);
std::vector<float> powerRight(const std::vector<float> &m, const std::vector<float> &p,
                              int64_t rows, int64_t cols, int64_t r);

/// Orthonormalises the r columns of a row-major [rows, r] matrix (modified
/// Gram-Schmidt); a column with no norm left becomes zero.
void orthonormaliseColumns(std::vector<float> &p, int64_t rows, int64_t r);

/// IEEE half and bfloat16 conversions (round to nearest even; NaN stays NaN).
uint16_t floatToHalf(float value);
float halfToFloat(uint16_t bits);
uint16_t floatToBF16(float value);
float bf16ToFloat(uint16_t bits);

} // namespace moert

#endif // MOERT_CODECS_H
