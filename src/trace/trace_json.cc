#include <cstdio>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "baton/engine.h"
#include "baton/trace.h"
#include "foundation/enum_table.h"

namespace baton {
namespace {

// Each event type once: its name, the words for its two fields (empty: the
// field says nothing) and its instant in the JSON (empty: none; a step's
// begin opens the step's slice instead). The text line and the JSON both
// read these rows.
struct EventTypeRow {
  TraceEventType value;
  absl::string_view name;
  absl::string_view a;
  absl::string_view b;
  absl::string_view instant;
};
constexpr EventTypeRow kEventTypes[] = {
    {TraceEventType::kNone, "none", "", "", ""},
    {TraceEventType::kStepBegin, "step_begin", "batch", "bucket", ""},
    {TraceEventType::kStepEnd, "step_end", "retired", "batch", "retire"},
    {TraceEventType::kAdmit, "admit", "admitted", "batch", "admit"},
    {TraceEventType::kExit, "exit", "reason", "batch", "exit"},
    {TraceEventType::kError, "error", "error_word", "", "device error"},
};

// Microseconds since `origin_ns`, with the timer's nanosecond resolution.
std::string Micros(unsigned long long ns, unsigned long long origin_ns) {
  const long long delta = static_cast<long long>(ns - origin_ns);
  return absl::StrFormat("%.3f", static_cast<double>(delta) * 1e-3);
}

// The event's fields as ` batch=2 bucket=1` (the text line) or as
// `,"batch":2,"bucket":1` (JSON, where a word is quoted). Field a is a word
// for an exit (the EngineExit's name) and an error (the word in hex).
std::string Fields(const TraceEvent& event, bool json) {
  const EventTypeRow* row = FindRow(kEventTypes, event.type);
  if (row == nullptr) return "";
  std::string out;
  auto add = [&](absl::string_view label, absl::string_view value, bool word) {
    if (label.empty()) return;
    if (!json) {
      absl::StrAppend(&out, " ", label, "=", value);
    } else if (word) {
      absl::StrAppend(&out, ",\"", label, "\":\"", value, "\"");
    } else {
      absl::StrAppend(&out, ",\"", label, "\":", value);
    }
  };
  if (event.type == TraceEventType::kExit) {
    add(row->a, EngineExitName(static_cast<EngineExit>(event.a)), true);
  } else if (event.type == TraceEventType::kError) {
    add(row->a, absl::StrFormat("0x%08x", event.a), true);
  } else {
    add(row->a, absl::StrCat(event.a), false);
  }
  add(row->b, absl::StrCat(event.b), false);
  return out;
}

std::string InstantJson(const TraceEvent& event, unsigned long long origin_ns,
                        absl::string_view name) {
  return absl::StrCat(R"({"name":")", name, R"(","cat":"scheduler","ph":"i","s":"t","ts":)",
                      Micros(event.time_ns, origin_ns), R"(,"pid":1,"tid":1,"args":{"step":)",
                      event.step, Fields(event, /*json=*/true), "}}");
}

}  // namespace

absl::string_view TraceEventTypeName(TraceEventType type) {
  return ColumnOf(kEventTypes, type, &EventTypeRow::name, "unknown");
}

std::string FormatTraceEvent(const TraceEvent& event, unsigned long long origin_ns) {
  return absl::StrCat("t=+", Micros(event.time_ns, origin_ns), "us step ", event.step, " ",
                      TraceEventTypeName(event.type), Fields(event, /*json=*/false));
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
    std::string args = absl::StrCat(R"("step":)", open->step, Fields(*open, /*json=*/true));
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
        break;
      case TraceEventType::kExit:
        close(event.time_ns, nullptr);
        break;
      default:
        break;
    }
    // The other events are instants; a step that retired nothing has none.
    const absl::string_view instant = ColumnOf(kEventTypes, event.type, &EventTypeRow::instant, "");
    if (!instant.empty() && (event.type != TraceEventType::kStepEnd || event.a > 0)) {
      add(InstantJson(event, origin, instant));
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
