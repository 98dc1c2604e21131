//===- Data.cpp - training data: token streams and batch sampling ---------===//

#include "moert/Data.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <new>
#include <sys/stat.h>

using namespace moert;

static bool endsWith(const std::string &s, const std::string &suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool moert::loadTokens(const std::string &path, DataFormat format, TokenStream &out,
                       std::string &error) {
  // A FIFO or device would block the open or have no size: the data is read
  // whole, by its size.
  struct stat info;
  if (::stat(path.c_str(), &info) == 0 && !S_ISREG(info.st_mode)) {
    error = path + ": cannot read data file: " +
            (S_ISDIR(info.st_mode) ? "it is a directory" : "not a regular file (a pipe or device)");
    return false;
  }
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) {
    error = path + ": cannot read data file: " + std::strerror(errno);
    return false;
  }
  std::streamoff size = in.tellg();
  if (size < 0) {
    error = path + ": cannot tell the size of the data file";
    return false;
  }
  if (size == 0) {
    error = path + ": the data file is empty";
    return false;
  }
  if (format == DataFormat::Auto)
    format = endsWith(path, ".bin") ? DataFormat::Bin : DataFormat::Text;
  int width = format == DataFormat::Bin ? 2 : format == DataFormat::Bin32 ? 4 : 1;
  if (format == DataFormat::Bin && size % 2 != 0) {
    error = path + ": a .bin token file holds uint16 tokens, but its size (" +
            std::to_string(size) + " bytes) is odd";
    return false;
  }
  if (format == DataFormat::Bin32 && size % 4 != 0) {
    error = path + ": a uint32 token file holds 4 bytes per token, but its size (" +
            std::to_string(size) + " bytes) is not a multiple of 4";
    return false;
  }
  // One read into a buffer of the file's size: no growth, no widening.
  try {
    out.raw.resize(static_cast<size_t>(size));
  } catch (const std::bad_alloc &) {
    error = path + ": the data file (" + std::to_string(size) + " bytes) does not fit in memory";
    return false;
  }
  out.width = width;
  in.seekg(0);
  if (!in.read(reinterpret_cast<char *>(out.raw.data()), size)) {
    error = path + ": error while reading the data file";
    out.raw.clear();
    return false;
  }
  out.maxToken = -1;
  for (size_t i = 0, n = out.size(); i < n; ++i) {
    int32_t t = out[i];
    if (t < 0) { // a uint32 past int32's range: no vocabulary has it
      error = path + ": token " + std::to_string(i) + " is " +
              std::to_string(static_cast<uint32_t>(t)) + ", past any vocabulary (2^31 - 1)";
      out.raw.clear();
      return false;
    }
    out.maxToken = std::max(out.maxToken, t);
  }
  return true;
}

size_t moert::trainSplitEnd(size_t n, double valFraction) {
  if (valFraction <= 0)
    return n;
  if (valFraction >= 1)
    return 0;
  return n - static_cast<size_t>(static_cast<double>(n) * valFraction);
}

BatchSampler::BatchSampler(const TokenStream &tokens, size_t begin, size_t end, int64_t batch,
                           int64_t seqLen, uint64_t seed)
    : tokens(tokens), begin(begin), end(end), batch(batch), seqLen(seqLen), seed(seed) {}

bool BatchSampler::valid(std::string &error) const {
  size_t need = static_cast<size_t>(seqLen) + 1;
  if (end < begin || end - begin < need) {
    error = "the data range has " + std::to_string(end - begin) +
            " tokens; one window needs seq_len + 1 = " + std::to_string(need);
    return false;
  }
  return true;
}

/// SplitMix64: a stateless hash of (seed, counter), so a position is enough
/// to resume.
static uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

void BatchSampler::next(std::vector<int32_t> &inputs, std::vector<int32_t> &targets) {
  size_t windows = end - begin - static_cast<size_t>(seqLen);
  inputs.resize(static_cast<size_t>(batch * seqLen));
  targets.resize(inputs.size());
  for (int64_t b = 0; b < batch; ++b) {
    uint64_t r = mix(seed ^ mix(drawn * static_cast<uint64_t>(batch) + b));
    size_t start = begin + static_cast<size_t>(r % windows);
    for (int64_t s = 0; s < seqLen; ++s) {
      inputs[b * seqLen + s] = tokens[start + s];
      targets[b * seqLen + s] = tokens[start + s + 1];
    }
  }
  ++drawn;
}
