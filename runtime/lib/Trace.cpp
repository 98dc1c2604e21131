//===- Trace.cpp - a rank's timeline as Chrome trace events ---------------===//

#include "Trace.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <thread>

double moert::nowSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void moert::waitUntil(double deadline) {
  constexpr double kSpin = 200e-6;
  if (double left = deadline - nowSeconds(); left > kSpin)
    std::this_thread::sleep_for(std::chrono::duration<double>(left - kSpin));
  while (nowSeconds() < deadline)
    std::this_thread::yield();
}

std::string moert_trace::chromeEvents(double origin) const {
  using nlohmann::json;
  static const char *const kLanes[] = {"compute", "communication", "steps", "background"};
  std::string out;
  auto append = [&](const json &event) { out += (out.empty() ? "" : ",\n") + event.dump(); };
  append({{"name", "process_name"},
          {"ph", "M"},
          {"pid", rank},
          {"args", {{"name", "rank " + std::to_string(rank)}}}});
  for (int lane = 0; lane < 4; ++lane)
    append({{"name", "thread_name"},
            {"ph", "M"},
            {"pid", rank},
            {"tid", lane},
            {"args", {{"name", kLanes[lane]}}}});
  for (const Event &e : events)
    append({{"name", e.name},
            {"ph", "X"},
            {"pid", rank},
            {"tid", e.lane},
            {"ts", (e.start - origin) * 1e6},
            {"dur", (e.end - e.start) * 1e6}});
  return out;
}
