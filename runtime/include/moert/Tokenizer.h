//===- Tokenizer.h - SentencePiece models for text in and out ---*- C++ -*-===//
//
// A SentencePiece model (Debian's libsentencepiece; `spm_train` writes
// them, and HuggingFace checkpoints of Llama-style families ship one as
// tokenizer.model): text to token ids and back. moe-tokenize turns a corpus
// into a token file with it, and the training binaries' --tokenizer encodes
// the sampling prompt and decodes the sample.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_TOKENIZER_H
#define MOERT_TOKENIZER_H

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace moert {

class Tokenizer {
public:
  Tokenizer();
  ~Tokenizer();
  Tokenizer(const Tokenizer &) = delete;
  Tokenizer &operator=(const Tokenizer &) = delete;

  /// Loads the model at `path`; false with `error` (naming the file) when it
  /// is missing or not a SentencePiece model.
  bool load(const std::string &path, std::string &error);
  bool loaded() const { return sp != nullptr; }
  /// Token ids are in [0, vocabSize()).
  int vocabSize() const;
  /// The beginning-of-sequence id, or -1 when the model has none.
  int bosId() const;
  /// The end-of-sequence id, or -1 when the model has none.
  int eosId() const;
  std::vector<int32_t> encode(const std::string &text) const;
  /// The text of `ids`: each end-of-sequence id ends a line (the inverse
  /// of encoding lines and appending eosId(), as moe-tokenize does), and an
  /// id outside the vocabulary reads `<id N>` (a model whose vocabulary is
  /// larger than the tokenizer's can sample one).
  std::string decode(const std::vector<int32_t> &ids) const;

private:
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp;
};

} // namespace moert

#endif // MOERT_TOKENIZER_H
