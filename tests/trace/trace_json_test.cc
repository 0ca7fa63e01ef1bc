// CPU tests of the trace's JSON export and the host half of the watchdog.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "baton/engine.h"
#include "baton/runtime.h"
#include "baton/trace.h"
#include "runtime/progress_watchdog.h"

namespace baton {
namespace {

bool Contains(absl::string_view text, absl::string_view part) {
  return text.find(part) != absl::string_view::npos;
}

size_t Count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = 0; (at = text.find(part, at)) != std::string::npos; at += part.size()) ++n;
  return n;
}

TraceEvent Event(unsigned long long ns, unsigned long long step, TraceEventType type,
                 std::uint32_t a, std::uint32_t b) {
  static std::uint32_t sequence = 0;
  TraceEvent event;
  event.time_ns = ns;
  event.step = step;
  event.sequence = sequence++;
  event.type = type;
  event.a = a;
  event.b = b;
  return event;
}

// Two steps and an exit, with the timestamps a real run would have.
std::vector<TraceEvent> TwoSteps() {
  const unsigned long long t0 = 1'700'000'000'000'000'000ull;  // a globaltimer-like epoch
  return {
      Event(t0, 0, TraceEventType::kAdmit, 3, 3),
      Event(t0 + 1000, 0, TraceEventType::kStepBegin, 3, 1),
      Event(t0 + 9500, 0, TraceEventType::kStepEnd, 1, 2),
      Event(t0 + 9800, 1, TraceEventType::kStepBegin, 2, 1),
      Event(t0 + 18000, 1, TraceEventType::kStepEnd, 2, 0),
      Event(t0 + 18200, 2, TraceEventType::kExit, static_cast<std::uint32_t>(EngineExit::kIdle), 0),
  };
}

TEST(TraceJson, OneSlicePerStepWithArgsAndInstantsForTheRest) {
  const std::string json = TraceJson(TwoSteps());
  EXPECT_EQ(Count(json, R"("ph":"X")"), 2u) << json;
  EXPECT_TRUE(Contains(json,
                       R"({"name":"step 0","cat":"step","ph":"X","ts":1.000,"dur":8.500,"pid":1,)"
                       R"("tid":1,"args":{"step":0,"batch":3,"bucket":1,"retired":1}})"))
      << json;
  EXPECT_TRUE(Contains(json, R"("name":"step 1","cat":"step","ph":"X","ts":9.800,"dur":8.200)"))
      << json;
  EXPECT_TRUE(Contains(json, R"("name":"admit")")) << json;
  EXPECT_TRUE(Contains(json, R"("admitted":3,"batch":3)")) << json;
  EXPECT_EQ(Count(json, R"("name":"retire")"), 2u) << json;
  EXPECT_TRUE(Contains(json, R"("name":"exit")")) << json;
  EXPECT_TRUE(Contains(json, R"("reason":"idle")")) << json;
  // Balanced brackets: a quick structural check without a JSON parser.
  EXPECT_EQ(Count(json, "{"), Count(json, "}"));
  EXPECT_EQ(Count(json, "["), Count(json, "]"));
  EXPECT_EQ(json.rfind("]}\n"), json.size() - 3);
}

TEST(TraceJson, AStepStillRunningBecomesAnUnfinishedSlice) {
  std::vector<TraceEvent> events = TwoSteps();
  events.resize(4);  // step 1 has begun, not ended
  const std::string json = TraceJson(events);
  EXPECT_EQ(Count(json, R"("ph":"X")"), 2u) << json;
  EXPECT_TRUE(Contains(json, R"("step":1,"batch":2,"bucket":1,"unfinished":true)")) << json;
}

TEST(TraceJson, ErrorsAndEmptyTraces) {
  std::vector<TraceEvent> events = {Event(5000, 7, TraceEventType::kError, 0x00050003u, 0)};
  EXPECT_TRUE(Contains(TraceJson(events), R"("error_word":"0x00050003")"));
  EXPECT_TRUE(Contains(FormatTraceEvent(events[0], 4000), "t=+1.000us step 7 error"));
  const std::string empty = TraceJson({});
  EXPECT_TRUE(Contains(empty, R"("traceEvents":[)"));
  EXPECT_EQ(Count(empty, R"("ph":"X")"), 0u);
}

TEST(TraceJson, WriteTraceJsonWritesTheFileOrNamesThePath) {
  const std::string path = ::testing::TempDir() + "/baton_trace_test.json";
  ASSERT_TRUE(WriteTraceJson(TwoSteps(), path).ok());
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  EXPECT_EQ(text.str(), TraceJson(TwoSteps()));
  std::remove(path.c_str());
  const absl::Status status = WriteTraceJson(TwoSteps(), "/nonexistent-dir/x/trace.json");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(status.message(), "/nonexistent-dir/x/trace.json")) << status;
}

TEST(ProgressWatchdog, FiresOnlyAfterTheWordStayedStillForTheTimeout) {
  detail::ProgressWatchdog watchdog(absl::Milliseconds(200));
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  EXPECT_FALSE(watchdog.Expired(t0, 0)) << "never armed: never fires";
  watchdog.Arm(t0, 5);
  EXPECT_FALSE(watchdog.Expired(t0 + absl::Milliseconds(150), 5));
  EXPECT_FALSE(watchdog.Expired(t0 + absl::Milliseconds(190), 6)) << "moved: the clock restarts";
  EXPECT_FALSE(watchdog.Expired(t0 + absl::Milliseconds(380), 6));
  EXPECT_TRUE(watchdog.Expired(t0 + absl::Milliseconds(391), 6));
  EXPECT_EQ(watchdog.StillFor(t0 + absl::Milliseconds(391), 6), absl::Milliseconds(201));
  // A host that polls rarely sees a moved word: no alarm for its own delay.
  EXPECT_FALSE(watchdog.Expired(t0 + absl::Seconds(10), 900));
  detail::ProgressWatchdog off;
  EXPECT_FALSE(off.enabled());
  off.Arm(t0, 0);
  EXPECT_FALSE(off.Expired(t0 + absl::Hours(1), 0));
}

TEST(RuntimeOptions, TraceCapacityAndWatchdogTimeoutAreChecked) {
  RuntimeOptions options;
  EXPECT_EQ(options.trace_capacity, 0u) << "the trace is off by default";
  options.trace_capacity = 1000;
  absl::Status status = ValidateRuntimeOptions(options);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(status.message(),
                       "RuntimeOptions.trace_capacity 1000 is neither 0 (off) nor a power of two"))
      << status;
  options.trace_capacity = 32;
  EXPECT_EQ(ValidateRuntimeOptions(options).code(), absl::StatusCode::kInvalidArgument);
  options.trace_capacity = 1u << 25;
  EXPECT_EQ(ValidateRuntimeOptions(options).code(), absl::StatusCode::kInvalidArgument);
  options.trace_capacity = 1u << 16;
  EXPECT_TRUE(ValidateRuntimeOptions(options).ok());
  options.watchdog_timeout = absl::ZeroDuration();
  status = ValidateRuntimeOptions(options);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(status.message(), "use absl::InfiniteDuration() to turn the watchdog off"))
      << status;
  options.watchdog_timeout = absl::InfiniteDuration();
  EXPECT_TRUE(ValidateRuntimeOptions(options).ok());
}

// The batch limit of the catalogue: above the runtime's limit (0 means the
// program's own).
TEST(RuntimeOptions, MaxBatchAboveTheLimitIsRefused) {
  RuntimeOptions options;
  options.max_batch = (1u << 16) + 1;
  options.mailbox_capacity = 1u << 17;
  const absl::Status status = ValidateRuntimeOptions(options);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_TRUE(Contains(status.message(), "is outside [0, 65536] (0: the step program's own)"))
      << status;
  options.max_batch = 0;
  EXPECT_TRUE(ValidateRuntimeOptions(options).ok());
}

}  // namespace
}  // namespace baton
