//===- moe-tokenize.cpp - text to token files and back ------------------===//
//
//   moe-tokenize --model M.model CORPUS.txt -o corpus.bin [--format u16|u32]
//   moe-tokenize --model M.model --decode corpus.bin [-o text.txt]
//
// Encodes each line of the corpus with a SentencePiece model into a token
// file the training binaries read (--data; u16 when the vocabulary fits,
// else u32 with --data-format u32), with a progress bar on a terminal; and
// decodes a token file back to text, one line per encoded line.
//
//===----------------------------------------------------------------------===//

#include "moert/Checkpoint.h"
#include "moert/Data.h"
#include "moert/Tokenizer.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <sys/stat.h>
#include <unistd.h>

namespace {

[[noreturn]] void die(const std::string &message) {
  std::fprintf(stderr, "moe-tokenize: error: %s\n", message.c_str());
  std::exit(1);
}

struct Options {
  std::string model, input, output, format;
  bool decode = false;
};

[[noreturn]] void usage(int status) {
  std::fprintf(status ? stderr : stdout,
               "usage: moe-tokenize --model M.model CORPUS.txt -o OUT [--format u16|u32]\n"
               "       moe-tokenize --model M.model --decode TOKENS [-o TEXT] [--format u16|u32]\n"
               "  Encodes each line of CORPUS with the SentencePiece model M into a token\n"
               "  file for the training binaries' --data (little-endian u16 when the\n"
               "  vocabulary fits, else u32: give the binary --data-format u32), with\n"
               "  the end-of-sentence id after each line when the model has one; or\n"
               "  decodes a token file back to text (to stdout without -o).\n");
  std::exit(status);
}

Options parse(int argc, char **argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc)
        die(a + " needs a value");
      return argv[++i];
    };
    if (a == "--model")
      o.model = value();
    else if (a == "-o")
      o.output = value();
    else if (a == "--format") {
      o.format = value();
      if (o.format != "u16" && o.format != "u32")
        die("--format expects u16 or u32, got '" + o.format + "'");
    } else if (a == "--decode")
      o.decode = true;
    else if (a == "--help" || a == "-h")
      usage(0);
    else if (!a.empty() && a[0] == '-')
      die("unknown option '" + a + "' (see --help)");
    else if (o.input.empty())
      o.input = a;
    else
      die("one input file, got '" + o.input + "' and '" + a + "'");
  }
  if (o.model.empty() || o.input.empty())
    usage(2);
  if (!o.decode && o.output.empty())
    die("-o OUT is required when encoding");
  return o;
}

/// One line, redrawn in place on a terminal (lines and tokens only when
/// the input's size is unknown: a pipe).
void progress(size_t done, size_t total, size_t lines, size_t tokens) {
  if (!total) {
    std::fprintf(stderr, "\r\033[K%zu lines, %zu tokens", lines, tokens);
    return;
  }
  const int width = 28;
  double share = std::min(1.0, static_cast<double>(done) / static_cast<double>(total));
  std::string bar(static_cast<size_t>(width * share), '#');
  bar.resize(width, '.');
  std::fprintf(stderr, "\r\033[K[%s] %3.0f%%  %zu tokens", bar.c_str(), 100.0 * share, tokens);
}

int encode(const Options &o, const moert::Tokenizer &tok) {
  std::ifstream in(o.input, std::ios::binary);
  if (!in)
    die(o.input + ": cannot read");
  // The progress bar's total: a regular file's size (0 for a pipe).
  struct stat st {};
  size_t total = stat(o.input.c_str(), &st) == 0 && S_ISREG(st.st_mode)
                     ? static_cast<size_t>(st.st_size)
                     : 0,
         done = 0;
  int width = o.format == "u32" || (o.format.empty() && tok.vocabSize() > 65536) ? 4 : 2;
  if (width == 2 && tok.vocabSize() > 65536)
    die("--format u16: the model's " + std::to_string(tok.vocabSize()) +
        " ids do not fit 16 bits (use u32)");
  int eos = tok.eosId();
  bool bar = isatty(fileno(stderr));
  std::string bytes, line;
  size_t tokens = 0, lines = 0;
  while (std::getline(in, line)) {
    done += line.size() + 1;
    ++lines;
    std::vector<int32_t> ids = tok.encode(line);
    if (eos >= 0)
      ids.push_back(eos);
    for (int32_t id : ids)
      for (int b = 0; b < width; ++b)
        bytes.push_back(static_cast<char>(static_cast<uint32_t>(id) >> (8 * b)));
    tokens += ids.size();
    if (bar && lines % 1024 == 0)
      progress(done, total, lines, tokens);
  }
  if (bar)
    std::fprintf(stderr, "\r\033[K");
  if (in.bad())
    die(o.input + ": read error after " + std::to_string(lines) + " lines");
  if (tokens == 0)
    die(o.input + ": no text to encode");
  std::string error;
  if (!moert::writeFileAtomic(o.output, bytes, error))
    die(error);
  std::printf("moe-tokenize: %zu lines, %zu tokens (vocabulary %d, %s) -> %s%s\n", lines, tokens,
              tok.vocabSize(), width == 2 ? "u16" : "u32", o.output.c_str(),
              width == 2 ? "" : " (train with --data-format u32)");
  return 0;
}

int decode(const Options &o, const moert::Tokenizer &tok) {
  moert::TokenStream data;
  std::string error;
  // As encoding chose it: u32 when the vocabulary does not fit 16 bits.
  bool wide = o.format == "u32" || (o.format.empty() && tok.vocabSize() > 65536);
  moert::DataFormat format = wide ? moert::DataFormat::Bin32 : moert::DataFormat::Bin;
  if (!moert::loadTokens(o.input, format, data, error))
    die(error);
  if (data.maxToken >= tok.vocabSize())
    die(o.input + ": token id " + std::to_string(data.maxToken) + " is outside the model's " +
        std::to_string(tok.vocabSize()) + " ids");
  std::vector<int32_t> ids(data.size());
  for (size_t i = 0; i < ids.size(); ++i)
    ids[i] = data[i];
  std::string text = tok.decode(ids);
  if (!text.empty() && text.back() != '\n')
    text += '\n'; // the last line, when the file does not end with the end-of-sequence id
  if (o.output.empty()) {
    std::fwrite(text.data(), 1, text.size(), stdout);
    return 0;
  }
  if (!moert::writeFileAtomic(o.output, text, error))
    die(error);
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  Options o = parse(argc, argv);
  moert::Tokenizer tok;
  std::string error;
  if (!tok.load(o.model, error))
    die(error);
  return o.decode ? decode(o, tok) : encode(o, tok);
}
