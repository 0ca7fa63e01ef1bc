#include <cstdio>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "baton/engine.h"
#include "baton/trace.h"

namespace baton {
namespace {

absl::string_view ExitReasonName(std::uint32_t reason) {
  return EngineExitName(static_cast<EngineExit>(reason));
}

// Microseconds since `origin_ns`, with the timer's nanosecond resolution.
std::string Micros(unsigned long long ns, unsigned long long origin_ns) {
  const long long delta = static_cast<long long>(ns - origin_ns);
  return absl::StrFormat("%.3f", static_cast<double>(delta) * 1e-3);
}

std::string InstantJson(const TraceEvent& event, unsigned long long origin_ns,
                        absl::string_view name, const std::string& args) {
  return absl::StrCat(R"({"name":")", name, R"(","cat":"scheduler","ph":"i","s":"t","ts":)",
                      Micros(event.time_ns, origin_ns), R"(,"pid":1,"tid":1,"args":{"step":)",
                      event.step, args, "}}");
}

}  // namespace

absl::string_view TraceEventTypeName(TraceEventType type) {
  switch (type) {
    case TraceEventType::kNone:
      return "none";
    case TraceEventType::kStepBegin:
      return "step_begin";
    case TraceEventType::kStepEnd:
      return "step_end";
    case TraceEventType::kAdmit:
      return "admit";
    case TraceEventType::kExit:
      return "exit";
    case TraceEventType::kError:
      return "error";
  }
  return "unknown";
}

std::string FormatTraceEvent(const TraceEvent& event, unsigned long long origin_ns) {
  std::string line = absl::StrCat("t=+", Micros(event.time_ns, origin_ns), "us step ", event.step,
                                  " ", TraceEventTypeName(event.type));
  switch (event.type) {
    case TraceEventType::kStepBegin:
      absl::StrAppend(&line, " batch=", event.a, " bucket=", event.b);
      break;
    case TraceEventType::kStepEnd:
      absl::StrAppend(&line, " retired=", event.a, " batch=", event.b);
      break;
    case TraceEventType::kAdmit:
      absl::StrAppend(&line, " admitted=", event.a, " batch=", event.b);
      break;
    case TraceEventType::kExit:
      absl::StrAppend(&line, " reason=", ExitReasonName(event.a), " batch=", event.b);
      break;
    case TraceEventType::kError:
      absl::StrAppend(&line, absl::StrFormat(" error_word=0x%08x", event.a));
      break;
    case TraceEventType::kNone:
      break;
  }
  return line;
}

std::string TraceJson(absl::Span<const TraceEvent> events) {
  std::string json = R"({"displayTimeUnit":"ns","traceEvents":[)";
  const unsigned long long origin = events.empty() ? 0 : events.front().time_ns;
  bool first = true;
  auto add = [&](const std::string& entry) {
    absl::StrAppend(&json, first ? "\n" : ",\n", entry);
    first = false;
  };
  add(R"({"name":"process_name","ph":"M","pid":1,"args":{"name":"baton device loop"}})");
  add(R"({"name":"thread_name","ph":"M","pid":1,"tid":1,"args":{"name":"scheduler"}})");
  // A step is a slice from its begin to the scheduler run that retires it
  // (or to the last event, for a step still running when the copy was made).
  const TraceEvent* open = nullptr;
  auto close = [&](unsigned long long end_ns, const TraceEvent* end) {
    if (open == nullptr) return;
    std::string args =
        absl::StrCat(R"("step":)", open->step, R"(,"batch":)", open->a, R"(,"bucket":)", open->b);
    if (end != nullptr) {
      absl::StrAppend(&args, R"(,"retired":)", end->a);
    } else {
      absl::StrAppend(&args, R"(,"unfinished":true)");
    }
    add(absl::StrCat(R"({"name":"step )", open->step, R"(","cat":"step","ph":"X","ts":)",
                     Micros(open->time_ns, origin), R"(,"dur":)", Micros(end_ns, open->time_ns),
                     R"(,"pid":1,"tid":1,"args":{)", args, "}}"));
    open = nullptr;
  };
  for (const TraceEvent& event : events) {
    switch (event.type) {
      case TraceEventType::kStepBegin:
        close(event.time_ns, nullptr);
        open = &event;
        break;
      case TraceEventType::kStepEnd:
        if (open != nullptr && open->step == event.step) close(event.time_ns, &event);
        if (event.a > 0) {
          add(InstantJson(event, origin, "retire",
                          absl::StrCat(R"(,"retired":)", event.a, R"(,"batch":)", event.b)));
        }
        break;
      case TraceEventType::kAdmit:
        add(InstantJson(event, origin, "admit",
                        absl::StrCat(R"(,"admitted":)", event.a, R"(,"batch":)", event.b)));
        break;
      case TraceEventType::kExit:
        close(event.time_ns, nullptr);
        add(InstantJson(
            event, origin, "exit",
            absl::StrCat(R"(,"reason":")", ExitReasonName(event.a), R"(","batch":)", event.b)));
        break;
      case TraceEventType::kError:
        add(InstantJson(event, origin, "device error",
                        absl::StrFormat(R"(,"error_word":"0x%08x")", event.a)));
        break;
      case TraceEventType::kNone:
        break;
    }
  }
  if (open != nullptr) close(events.back().time_ns, nullptr);
  absl::StrAppend(&json, "\n]}\n");
  return json;
}

absl::Status WriteTraceJson(absl::Span<const TraceEvent> events, const std::string& path) {
  std::ofstream file(path, std::ios::out | std::ios::trunc);
  if (!file) {
    return absl::InvalidArgumentError(
        absl::StrCat("WriteTraceJson: cannot open '", path, "' for writing: check the folder"));
  }
  file << TraceJson(events);
  file.close();
  if (!file) {
    return absl::InvalidArgumentError(absl::StrCat("WriteTraceJson: writing '", path, "' failed"));
  }
  return absl::OkStatus();
}

}  // namespace baton
