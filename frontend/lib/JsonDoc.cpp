//===- JsonDoc.cpp - JSON with source positions ---------------------------===//

#include "moe/Frontend/JsonDoc.h"

#include "moec/contract/NestingDepth.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include <sys/stat.h>

using namespace moec::frontend;
using nlohmann::json;

std::string JsonDoc::child(const std::string &pointer, const std::string &key) {
  std::string escaped;
  for (char c : key) {
    if (c == '~')
      escaped += "~0";
    else if (c == '/')
      escaped += "~1";
    else
      escaped += c;
  }
  return pointer + "/" + escaped;
}

namespace moec::frontend {
/// Walks a document nlohmann has already accepted and records where each
/// value and key starts; reports duplicate keys.
class PositionScanner {
public:
  PositionScanner(const std::string &text, JsonDoc &doc, DiagnosticList &diags)
      : text(text), doc(doc), diags(diags) {
    lineStarts.push_back(0);
    for (size_t i = 0; i < text.size(); ++i)
      if (text[i] == '\n')
        lineStarts.push_back(i + 1);
  }

  SourcePos pos(size_t offset) const {
    auto it = std::upper_bound(lineStarts.begin(), lineStarts.end(), offset);
    size_t line = static_cast<size_t>(it - lineStarts.begin());
    return {static_cast<unsigned>(line), static_cast<unsigned>(offset - lineStarts[line - 1] + 1)};
  }

  bool run() {
    if (text.compare(0, 3, "\xEF\xBB\xBF") == 0)
      i = 3;
    value("", SourcePos());
    return ok;
  }

private:
  void skipSpace() {
    while (i < text.size() && std::strchr(" \t\r\n", text[i]) && text[i])
      ++i;
  }

  std::string stringToken() {
    size_t start = i++;
    while (i < text.size() && text[i] != '"')
      i += text[i] == '\\' ? 2 : 1;
    ++i;
    return json::parse(text.substr(start, i - start)).get<std::string>();
  }

  void value(const std::string &pointer, SourcePos key) {
    skipSpace();
    SourcePos here = pos(i);
    doc.positions[pointer] = {key.line ? key : here, here};
    char c = text[i];
    if (c == '{') {
      ++i;
      skipSpace();
      if (text[i] == '}') {
        ++i;
        return;
      }
      std::set<std::string> seen;
      while (true) {
        skipSpace();
        SourcePos keyPos = pos(i);
        std::string name = stringToken();
        if (!seen.insert(name).second) {
          diags.error(doc.file(), keyPos,
                      JsonDoc::child(pointer, name) + ": duplicate key \"" + name + "\"");
          ok = false;
        }
        skipSpace();
        ++i; // ':'
        value(JsonDoc::child(pointer, name), keyPos);
        skipSpace();
        if (text[i++] == '}')
          return;
      }
    }
    if (c == '[') {
      ++i;
      skipSpace();
      if (text[i] == ']') {
        ++i;
        return;
      }
      for (size_t index = 0;; ++index) {
        value(pointer + "/" + std::to_string(index), SourcePos());
        skipSpace();
        if (text[i++] == ']')
          return;
      }
    }
    if (c == '"') {
      stringToken();
      return;
    }
    while (i < text.size() && !std::strchr(",]} \t\r\n", text[i]))
      ++i;
  }

  const std::string &text;
  JsonDoc &doc;
  DiagnosticList &diags;
  std::vector<size_t> lineStarts;
  size_t i = 0;
  bool ok = true;
};
} // namespace moec::frontend

/// The part of an nlohmann message after its "[json.exception...] " prefix
/// and "parse error at line L, column C: ".
static std::string plainMessage(const std::string &what) {
  std::string msg = what;
  if (size_t close = msg.find("] "); close != std::string::npos)
    msg = msg.substr(close + 2);
  if (msg.rfind("parse error", 0) == 0)
    if (size_t colon = msg.find(": "); colon != std::string::npos)
      msg = msg.substr(colon + 2);
  return msg;
}

/// Offset of the token a parse error is about: nlohmann reports the last
/// character it read; step back over whitespace to the offending token and
/// then to its start.
static size_t parseErrorOffset(const std::string &text, size_t lastRead) {
  size_t off = std::min(lastRead, text.size());
  if (off > 0)
    --off; // nlohmann counts bytes from 1
  auto isSpace = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; };
  while (off > 0 && (off >= text.size() || isSpace(text[off])))
    --off;
  auto isWord = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '+' ||
           c == '_';
  };
  if (off < text.size() && isWord(text[off]))
    while (off > 0 && isWord(text[off - 1]))
      --off;
  return off;
}

std::unique_ptr<JsonDoc> JsonDoc::parse(std::string file, const std::string &text,
                                        DiagnosticList &diags) {
  auto doc = std::unique_ptr<JsonDoc>(new JsonDoc());
  doc->fileName = std::move(file);
  // Iterative, so any input is safe to scan; the parser and the position
  // scanner (recursive) only see documents that pass.
  if (auto deep = moec::contract::findTooDeep(text, kMaxDepth, moec::contract::kJsonNesting)) {
    PositionScanner lines(text, *doc, diags);
    diags.error(doc->fileName, lines.pos(deep->offset),
                "malformed JSON: nested deeper than " + std::to_string(kMaxDepth) + " levels");
    return nullptr;
  }
  try {
    doc->rootValue = json::parse(text);
  } catch (const json::parse_error &e) {
    std::string msg = plainMessage(e.what());
    if (text.find_first_not_of(" \t\r\n") == std::string::npos)
      msg = "empty document; expected a JSON object";
    PositionScanner lines(text, *doc, diags);
    diags.error(doc->fileName,
                text.empty() ? SourcePos{1, 1} : lines.pos(parseErrorOffset(text, e.byte)),
                "malformed JSON: " + msg);
    return nullptr;
  } catch (const json::exception &e) {
    // Number overflow (e.g. 1e400) carries no position: find the literal.
    std::string msg = plainMessage(e.what());
    SourcePos where;
    if (size_t q = msg.find('\''); q != std::string::npos) {
      std::string literal = msg.substr(q + 1, msg.find('\'', q + 1) - q - 1);
      if (size_t off = text.find(literal); off != std::string::npos) {
        PositionScanner lines(text, *doc, diags);
        where = lines.pos(off);
      }
    }
    diags.error(doc->fileName, where, "malformed JSON: " + msg);
    return nullptr;
  }
  PositionScanner scanner(text, *doc, diags);
  if (!scanner.run())
    return nullptr;
  return doc;
}

std::unique_ptr<JsonDoc> JsonDoc::withMembers(const nlohmann::json &members) const {
  auto copy = std::make_unique<JsonDoc>(*this);
  for (auto it = members.begin(); it != members.end(); ++it) {
    std::string at = child("", it.key());
    // The member's old value (and anything under it) is gone.
    for (auto p = copy->positions.lower_bound(at);
         p != copy->positions.end() && p->first.compare(0, at.size(), at) == 0;)
      p = (p->first.size() == at.size() || p->first[at.size()] == '/') ? copy->positions.erase(p)
                                                                       : std::next(p);
    copy->positions[at] = {keyPos(at), keyPos(at)};
    copy->rootValue[it.key()] = it.value();
  }
  return copy;
}

std::unique_ptr<JsonDoc> JsonDoc::load(const std::string &path, DiagnosticList &diags) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    diags.error(path, SourcePos(), std::string("cannot read file: ") + std::strerror(errno));
    return nullptr;
  }
  // A directory, a FIFO or a device would read as nothing, or block.
  if (!S_ISREG(st.st_mode)) {
    diags.error(path, SourcePos(), "cannot read file: not a regular file");
    return nullptr;
  }
  if (st.st_size > kMaxBytes) {
    diags.error(path, SourcePos(),
                "file of " + std::to_string(st.st_size) + " bytes is larger than the " +
                    std::to_string(kMaxBytes) + " bytes a description may take");
    return nullptr;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    diags.error(path, SourcePos(), std::string("cannot read file: ") + std::strerror(errno));
    return nullptr;
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) {
    diags.error(path, SourcePos(), "error while reading the file");
    return nullptr;
  }
  return parse(path, text.str(), diags);
}

SourcePos JsonDoc::valuePos(const std::string &pointer) const {
  std::string p = pointer;
  while (true) {
    auto it = positions.find(p);
    if (it != positions.end())
      return it->second.value;
    if (p.empty())
      return SourcePos();
    p = p.substr(0, p.rfind('/'));
  }
}

SourcePos JsonDoc::keyPos(const std::string &pointer) const {
  auto it = positions.find(pointer);
  return it != positions.end() ? it->second.key : valuePos(pointer);
}
