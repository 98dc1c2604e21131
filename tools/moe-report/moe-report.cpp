//===- moe-report.cpp - a training run's metrics as one HTML page ---------===//
//
//   moe-report METRICS.jsonl [--plan PLAN.json] [-o REPORT.html]
//
// Reads the JSON lines a training binary writes with --metrics
// (docs/Metrics.md) and, optionally, the plan report `moec --cluster` or
// moe-plan-sharding writes (report-json), and writes one self-contained
// page: Chart.js, the page's script (report.js) and the data are all inside
// it, so it opens offline. Later lines of a step supersede earlier ones (a
// resumed run repeats the steps after its checkpoint). Bad input is an
// error with its file and line; the output is written whole or not at all.
//
//===----------------------------------------------------------------------===//

#include "ReportAssets.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include <unistd.h>

using nlohmann::json;

namespace {

[[noreturn]] void fail(const std::string &message) {
  std::fprintf(stderr, "moe-report: %s\n", message.c_str());
  std::exit(1);
}

std::string joined(const char *const *chunks) {
  std::string out;
  for (; *chunks; ++chunks)
    out += *chunks;
  return out;
}

/// `text` with every `from` replaced by `to`.
std::string replaced(std::string text, const std::string &from, const std::string &to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
    text.replace(at, from.size(), to);
  return text;
}

/// Safe inside a <script> element.
std::string scriptSafe(const std::string &text) { return replaced(text, "</", "<\\/"); }

std::string htmlEscaped(const std::string &text) {
  std::string out;
  for (char c : text)
    out += c == '<' ? "&lt;" : c == '>' ? "&gt;" : c == '&' ? "&amp;" : std::string(1, c);
  return out;
}

/// A JSON value parsed from `text`, or an error at `where` (with the line
/// and column of a syntax error within `text` when it spans lines).
json parseAt(const std::string &text, const std::string &where) {
  try {
    return json::parse(text);
  } catch (const json::parse_error &e) {
    fail(where + ": not JSON: " + e.what());
  }
}

struct Metrics {
  std::map<long long, json> steps, evals;
  json migrations = json::array(), memory, samples = json::array(), run;
};

Metrics readMetrics(const std::string &path) {
  std::ifstream in(path);
  if (!in)
    fail(path + ": cannot read: " + std::strerror(errno));
  Metrics m;
  std::string line;
  for (long long number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos)
      continue;
    std::string where = path + ":" + std::to_string(number);
    // A live run is writing its last line, and a killed one may have left
    // it cut: a last line without its newline that is not JSON yet is
    // skipped with a warning. Anywhere else a bad line is an error.
    if (in.eof() && !json::accept(line)) {
      std::fprintf(stderr, "moe-report: warning: %s: the last line is incomplete (a run still "
                   "writing, or one that was killed): skipped\n", where.c_str());
      break;
    }
    json row = parseAt(line, where);
    if (!row.is_object())
      fail(where + ": a metrics line is a JSON object, got " + std::string(row.type_name()));
    auto requireCount = [&](const char *key) {
      const json &v = row[key];
      if (!v.is_number_integer() || v.get<long long>() < 0)
        fail(where + ": \"" + key + "\" must be an integer >= 0, got " + v.dump());
      return v.get<long long>();
    };
    auto requireNumber = [&](const char *key) {
      if (!row[key].is_number())
        fail(where + ": \"" + key + "\" must be a number, got " + row[key].dump());
    };
    if (row.contains("loss") && row.contains("step")) {
      requireNumber("loss");
      m.steps[requireCount("step")] = row;
    } else if (row.contains("val_loss")) {
      requireNumber("val_loss");
      m.evals[requireCount("step")] = row;
    } else if (row.contains("migration")) {
      requireCount("step");
      if (!row["migration"].is_object())
        fail(where + ": \"migration\" must be an object");
      m.migrations.push_back(row);
    } else if (row.contains("run")) {
      if (!row["run"].is_object())
        fail(where + ": \"run\" must be an object");
      m.run = row["run"]; // a resumed run's line replaces the first
    } else if (row.contains("peak_rss_bytes")) {
      m.memory = row;
    } else if (row.contains("sample")) {
      m.samples.push_back(row);
    }
  }
  if (m.steps.empty())
    fail(path + ": no training steps (lines with \"step\" and \"loss\"); is it a --metrics file?");
  return m;
}

void writeAtomically(const std::string &path, const std::string &text) {
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary);
    if (!out || !(out << text) || !out.flush()) {
      ::unlink(tmp.c_str());
      fail(path + ": cannot write: " + std::strerror(errno));
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    fail(path + ": cannot write: " + std::strerror(errno));
  }
}

void usage() {
  std::fprintf(stderr, "usage: moe-report METRICS.jsonl [--plan PLAN.json] [-o REPORT.html]\n"
                       "  writes one self-contained HTML page (default: METRICS.html) with the\n"
                       "  run's loss, throughput, learning rate, gradient norm, step and\n"
                       "  collective times, drops, balancedness, bytes per collective, codecs,\n"
                       "  the expert load per MoE layer, the plan and migrations.\n");
}

} // namespace

int main(int argc, char **argv) {
  std::string metricsPath, planPath, outPath;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc)
        fail(a + " needs a value");
      return argv[++i];
    };
    if (a == "--help" || a == "-h") {
      usage();
      return 0;
    } else if (a == "--plan") {
      planPath = value();
    } else if (a == "-o") {
      outPath = value();
    } else if (!a.empty() && a[0] == '-') {
      usage();
      fail("unknown option " + a);
    } else if (metricsPath.empty()) {
      metricsPath = a;
    } else {
      fail("one metrics file only (got " + metricsPath + " and " + a + ")");
    }
  }
  if (metricsPath.empty()) {
    usage();
    fail("no metrics file given");
  }
  if (outPath.empty())
    outPath = metricsPath + ".html";
  if (outPath == metricsPath || outPath == planPath)
    fail(outPath + ": the report would overwrite its input");

  Metrics m = readMetrics(metricsPath);
  json data = {{"source", metricsPath},  {"steps", json::array()},
               {"evals", json::array()}, {"migrations", m.migrations},
               {"memory", m.memory},     {"samples", m.samples},
               {"run", m.run},           {"plan", nullptr}};
  for (auto &[step, row] : m.steps)
    data["steps"].push_back(row);
  for (auto &[step, row] : m.evals)
    data["evals"].push_back(row);
  if (!planPath.empty()) {
    std::ifstream in(planPath);
    if (!in)
      fail(planPath + ": cannot read: " + std::strerror(errno));
    std::stringstream text;
    text << in.rdbuf();
    json plan = parseAt(text.str(), planPath);
    // moec --emit=plan's manifest carries the report as "sharding".
    if (plan.is_object() && plan.contains("sharding"))
      plan = json(plan["sharding"]);
    if (!plan.is_object() || !plan.contains("chosen"))
      fail(planPath + ": not a plan report (an object with \"chosen\": moec --cluster "
                      "--emit=plan's manifest, or moe-plan-sharding report-json's)");
    data["plan"] = plan;
  }
  std::string page = joined(kTemplate);
  page = replaced(page, "@TITLE@", htmlEscaped(metricsPath));
  // Data first: the other substitutions' texts must not be searched again.
  std::string parts[3] = {scriptSafe(data.dump()), scriptSafe(joined(kChartJs)),
                          scriptSafe(joined(kReportJs))};
  const char *marks[3] = {"/*@DATA@*/", "/*@CHARTJS@*/", "/*@REPORTJS@*/"};
  std::string out;
  size_t at = 0;
  while (true) {
    size_t best = std::string::npos;
    int which = -1;
    for (int k = 0; k < 3; ++k) {
      size_t p = page.find(marks[k], at);
      if (p < best)
        best = p, which = k;
    }
    if (which < 0)
      break;
    out += page.substr(at, best - at) + parts[which];
    at = best + std::strlen(marks[which]);
  }
  out += page.substr(at);
  writeAtomically(outPath, out);
  std::printf("moe-report: %s (%zu steps, %zu evaluations, %zu migrations%s)\n", outPath.c_str(),
              m.steps.size(), m.evals.size(), m.migrations.size(),
              planPath.empty() ? "" : ", the plan");
  return 0;
}
