//===- Tokenizer.cpp - SentencePiece models for text in and out -----------===//

#include "moert/Tokenizer.h"

#include <sentencepiece_processor.h>

using namespace moert;

Tokenizer::Tokenizer() = default;
Tokenizer::~Tokenizer() = default;

bool Tokenizer::load(const std::string &path, std::string &error) {
  auto model = std::make_unique<sentencepiece::SentencePieceProcessor>();
  sentencepiece::util::Status status = model->Load(path);
  if (!status.ok()) {
    error = path + ": not a SentencePiece model (" + status.ToString() + ")";
    return false;
  }
  sp = std::move(model);
  return true;
}

int Tokenizer::vocabSize() const { return sp ? sp->GetPieceSize() : 0; }

int Tokenizer::bosId() const { return sp ? sp->bos_id() : -1; }

int Tokenizer::eosId() const { return sp ? sp->eos_id() : -1; }

std::vector<int32_t> Tokenizer::encode(const std::string &text) const {
  std::vector<int> ids;
  sp->Encode(text, &ids);
  return std::vector<int32_t>(ids.begin(), ids.end());
}

std::string Tokenizer::decode(const std::vector<int32_t> &ids) const {
  std::string text, piece;
  std::vector<int> run; // ids decoded together (pieces join across them)
  auto flush = [&] {
    sp->Decode(run, &piece);
    text += piece;
    run.clear();
  };
  for (int32_t id : ids) {
    if (id >= 0 && id < vocabSize() && id != eosId()) {
      run.push_back(id);
      continue;
    }
    flush();
    text += id == eosId() ? "\n" : "<id " + std::to_string(id) + ">";
  }
  flush();
  return text;
}
