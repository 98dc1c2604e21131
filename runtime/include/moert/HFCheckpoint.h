//===- HFCheckpoint.h - HuggingFace safetensors checkpoints -----*- C++ -*-===//
//
// The weights of a HuggingFace model directory: `model.safetensors`, or
// the shards that `model.safetensors.index.json` maps each tensor to
// (`weight_map`), each an 8-byte little-endian header length, a JSON header
// (dtype, shape, data_offsets per tensor) and the data. The reader maps the
// files into memory and converts only the elements asked for to f32, so a
// rank that reads its experts' slices touches only their pages; it counts
// the bytes it converted. The writer produces what HuggingFace
// `transformers` loads: one file, or shards of at most a given size with
// their index, `{"format": "pt"}` metadata, F32, BF16 or F16.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_HFCHECKPOINT_H
#define MOERT_HFCHECKPOINT_H

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace moert {

enum class HFDtype { F32, BF16, F16 };

/// "F32", "BF16", "F16" (safetensors' names) and torch's "float32",
/// "bfloat16", "float16".
const char *safetensorsName(HFDtype dtype);
const char *torchName(HFDtype dtype);
size_t bytesOf(HFDtype dtype);

/// One tensor of a checkpoint directory, in its mapped file.
struct HFTensor {
  std::string file; ///< the file holding it (within the directory)
  HFDtype dtype;
  std::vector<int64_t> shape;
  const unsigned char *data; ///< its first element, in the mapped file
  int64_t numel() const;
};

class HFCheckpointReader {
public:
  HFCheckpointReader() = default;
  ~HFCheckpointReader();
  HFCheckpointReader(const HFCheckpointReader &) = delete;
  HFCheckpointReader &operator=(const HFCheckpointReader &) = delete;

  /// Opens directory `dir`; false with `error` (naming the file and what is
  /// wrong) for a missing, truncated or malformed file or index.
  bool open(const std::string &dir, std::string &error);
  /// The tensor called `name`, or null.
  const HFTensor *find(const std::string &name) const;
  const std::map<std::string, HFTensor> &tensors() const { return all; }
  /// Elements [begin, begin + count) of `t` as f32 into `out`.
  void read(const HFTensor &t, int64_t begin, int64_t count, float *out);
  /// Bytes read() converted so far, and the bytes of every tensor.
  uint64_t bytesRead() const { return converted; }
  uint64_t totalBytes() const;

private:
  struct Mapping {
    void *base = nullptr;
    size_t size = 0;
  };
  bool mapFile(const std::string &dir, const std::string &file, std::string &error);

  std::vector<Mapping> mappings;
  std::map<std::string, HFTensor> all;
  uint64_t converted = 0;
};

/// One tensor to write: f32 values converted to the file's dtype.
struct HFTensorOut {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> data;
};

/// Writes `tensors` into directory `dir` (created if missing) as
/// `model.safetensors`, or, when they exceed `maxShardBytes`, as
/// `model-0000i-of-0000n.safetensors` with `model.safetensors.index.json`;
/// weight files of an earlier export that this one does not rewrite are
/// removed. Each file is written atomically, the index last.
bool writeHFCheckpoint(const std::string &dir, const std::vector<HFTensorOut> &tensors,
                       HFDtype dtype, uint64_t maxShardBytes, std::string &error);

} // namespace moert

#endif // MOERT_HFCHECKPOINT_H
