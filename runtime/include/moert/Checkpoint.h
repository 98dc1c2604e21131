//===- Checkpoint.h - atomic checkpoints in safetensors + JSON --*- C++ -*-===//
//
// A checkpoint is a directory with `tensors.safetensors` (parameters and
// optimiser moments, f32, in the safetensors layout: an 8-byte little-endian
// header length, a JSON header of dtype/shape/data_offsets per tensor, then
// the data) and `state.json` (step, data position, seed, grid, anything
// else). The state is also recorded in the tensors' own header (safetensors
// `__metadata__`, key `moec.state`): that one file is the atomic unit, and
// state.json is a readable copy written after it. Each file is written to a
// temporary name, fsync'ed and renamed into place, then the directory is
// fsync'ed, so a crash at any moment leaves the old checkpoint or the new
// one; a crash between the two renames leaves a state.json one save behind,
// which the reader notices and ignores (it never mixes steps). Temporary
// files of killed saves are removed by the next save. The reader validates
// everything and names what is wrong.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_CHECKPOINT_H
#define MOERT_CHECKPOINT_H

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace moert {

struct HostTensor {
  std::vector<int64_t> shape;
  std::vector<float> data;
};

using TensorMap = std::map<std::string, HostTensor>;

/// Writes `tensors` and `state` into directory `dir` (created if missing).
/// With `keep` > 1 the save is also kept as `dir/step-<state.step>.safetensors`
/// and the oldest such files beyond `keep` are removed. Each is a complete
/// checkpoint (its state travels inside it): to go back, copy one over
/// `dir/tensors.safetensors`.
bool saveCheckpoint(const std::string &dir, const TensorMap &tensors, const nlohmann::json &state,
                    std::string &error, int keep = 1);

/// Reads a checkpoint written by saveCheckpoint: the state recorded with
/// the tensors (state.json for checkpoints without one). `note` says when
/// state.json disagreed with it and was ignored.
bool loadCheckpoint(const std::string &dir, TensorMap &tensors, nlohmann::json &state,
                    std::string &error, std::string *note = nullptr);

/// The values a resume takes from a checkpoint's state.
struct ResumeState {
  long long step = 0;
  uint64_t dataPosition = 0;
};

/// Checks every value of a loaded `state` before any is used (the step and
/// the data position are integers >= 0; a recorded seed equals `seed`);
/// `where` names the state in errors.
bool readResumeState(const nlohmann::json &state, const std::string &where, uint64_t seed,
                     ResumeState &out, std::string &error);

/// safetensors encoding of `tensors` (all F32) with string `metadata`, and
/// its inverse; `origin` names the data in errors.
std::string encodeSafetensors(const TensorMap &tensors,
                              const std::map<std::string, std::string> &metadata = {});
bool decodeSafetensors(const std::string &bytes, const std::string &origin, TensorMap &tensors,
                       std::string &error, std::map<std::string, std::string> *metadata = nullptr);

/// Parses `text` as a JSON object (refused before parsing when it nests
/// deeper than 64 levels); a discarded value with `why` set otherwise.
nlohmann::json parseJsonObject(const std::string &text, std::string &why);

/// One tensor's entry of a safetensors header, checked.
struct SafetensorsEntry {
  std::string dtype; ///< one of the reader's dtypes
  std::vector<int64_t> shape;
  uint64_t elements = 0, begin = 0, end = 0; ///< data_offsets within the data
};
/// Reads `entry` (dtype, shape, data_offsets) of a header whose data are
/// `dataSize` bytes: the dtype one of `dtypes` (name, bytes per element),
/// every dimension and the element count at most 2^40, the offsets within
/// the data and as long as the shape needs. Otherwise false, `why` saying
/// what is wrong.
bool readSafetensorsEntry(const nlohmann::json &entry,
                          const std::vector<std::pair<std::string, size_t>> &dtypes,
                          uint64_t dataSize, SafetensorsEntry &out, std::string &why);

/// Removes `*.tmp.<pid>` files in `dir` left by saves whose process is gone.
void removeStaleTemporaries(const std::string &dir);

/// Writes `contents` to `path` atomically (temporary file, fsync, rename,
/// fsync of the directory).
bool writeFileAtomic(const std::string &path, const std::string &contents, std::string &error);

/// Takes the next piece of a file being written; false after a failed write.
using ByteSink = std::function<bool(const char *, size_t)>;
/// writeFileAtomic of the pieces `write` hands to its sink in order, so
/// large contents need not be in memory at once.
bool writeFileAtomicWith(const std::string &path, std::string &error,
                         const std::function<bool(const ByteSink &)> &write);

} // namespace moert

#endif // MOERT_CHECKPOINT_H
