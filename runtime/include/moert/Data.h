//===- Data.h - training data: token streams and batch sampling -*- C++ -*-===//
//
// The runtime's data loading: a corpus is one token stream, read either as
// raw text (every byte a token, vocabulary 256), as a nanoGPT-style .bin
// file (little-endian uint16 tokens), or as little-endian uint32 tokens
// (vocabularies past 65,536: Qwen, DeepSeek). The last `valFraction` of the stream is
// the validation split. Batches are random windows drawn from a seed and a
// draw counter, so the data position of a run is one integer a checkpoint
// records and a resumed run continues exactly.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_DATA_H
#define MOERT_DATA_H

#include <cstdint>
#include <string>
#include <vector>

namespace moert {

/// Text: one byte per token; Bin: little-endian uint16 (nanoGPT); Bin32:
/// little-endian uint32.
enum class DataFormat { Auto, Text, Bin, Bin32 };

/// The corpus as stored in its file: one byte per token (text), two
/// (little-endian uint16) or four (uint32). Kept in that form, not widened,
/// so the data costs exactly its file size in memory.
struct TokenStream {
  std::vector<uint8_t> raw;
  int width = 1;         ///< bytes per token: 1 (text), 2 or 4
  int32_t maxToken = -1; ///< largest token id present (token ids past 2^31 - 1 are refused)

  /// Token ids rather than text bytes.
  bool wide() const { return width > 1; }
  size_t size() const { return raw.size() / static_cast<size_t>(width); }
  int32_t operator[](size_t i) const {
    const uint8_t *p = raw.data() + i * static_cast<size_t>(width);
    switch (width) {
    case 2:
      return static_cast<int32_t>(p[0] | (p[1] << 8));
    case 4:
      return static_cast<int32_t>(static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
                                  (static_cast<uint32_t>(p[2]) << 16) |
                                  (static_cast<uint32_t>(p[3]) << 24));
    default:
      return static_cast<int32_t>(p[0]);
    }
  }
  /// Bytes of memory the stream holds.
  size_t bytes() const { return raw.size(); }
};

/// Reads `path`. `Auto` picks Bin for a `.bin` suffix, Text otherwise.
/// Returns false and sets `error` (with the path) for an unreadable file, an
/// empty one, a token file whose size is not a whole number of tokens, or
/// a uint32 token past 2^31 - 1.
bool loadTokens(const std::string &path, DataFormat format, TokenStream &out, std::string &error);

/// Random windows of `seqLen + 1` tokens from `[begin, end)` of a stream:
/// inputs are the first `seqLen`, targets the last `seqLen`.
class BatchSampler {
public:
  BatchSampler(const TokenStream &tokens, size_t begin, size_t end, int64_t batch, int64_t seqLen,
               uint64_t seed);

  /// False (with `error`) when the range is shorter than one window.
  bool valid(std::string &error) const;

  /// Fills `inputs` and `targets` (`batch * seqLen` each) with the next
  /// batch and advances the draw counter.
  void next(std::vector<int32_t> &inputs, std::vector<int32_t> &targets);

  /// The draw counter: batches drawn so far. Setting it resumes a run.
  uint64_t position() const { return drawn; }
  void setPosition(uint64_t position) { drawn = position; }

private:
  const TokenStream &tokens;
  size_t begin, end;
  int64_t batch, seqLen;
  uint64_t seed, drawn = 0;
};

/// The boundary between the train and validation parts of `n` tokens.
size_t trainSplitEnd(size_t n, double valFraction);

} // namespace moert

#endif // MOERT_DATA_H
