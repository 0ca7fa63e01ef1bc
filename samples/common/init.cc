#include "common/init.h"

#include <cstdio>
#include <iostream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

ABSL_FLAG(std::string, json, "", "write the results as JSON to this file");

namespace baton::samples {

absl::StatusOr<std::vector<std::uint32_t>> ParsePositiveList(const std::string& flag,
                                                             const char* name) {
  std::vector<std::uint32_t> out;
  for (absl::string_view part : absl::StrSplit(flag, ',', absl::SkipEmpty())) {
    std::uint32_t v = 0;
    if (!absl::SimpleAtoi(part, &v) || v == 0) {
      return absl::InvalidArgumentError(absl::StrCat("--", name, ": '", part, "' is not >= 1"));
    }
    out.push_back(v);
  }
  if (out.empty()) return absl::InvalidArgumentError(absl::StrCat("--", name, " is empty"));
  return out;
}

void InitSample(int argc, char** argv, const char* usage) {
  absl::FlagsUsageConfig config;
  config.contains_help_flags = [](absl::string_view file) {
    return absl::StrContains(file, "samples/");
  };
  config.contains_helpshort_flags = config.contains_help_flags;
  absl::SetFlagsUsageConfig(config);
  absl::SetProgramUsageMessage(usage);
  absl::ParseCommandLine(argc, argv);
}

int RunSample(int argc, char** argv, const char* name, const char* usage,
              const std::function<absl::Status(Report&)>& run) {
  InitSample(argc, argv, usage);
  Report report(name);
  const absl::Status status = run(report);
  if (!status.ok()) {
    std::fprintf(stderr, "%s: %s\n", name, status.ToString().c_str());
    // No GPU is not a failure of Baton, but the sample could not show anything.
    return status.code() == absl::StatusCode::kFailedPrecondition ? 2 : 1;
  }
  report.Print(std::cout);
  const std::string json = absl::GetFlag(FLAGS_json);
  if (!json.empty()) {
    const absl::Status written = report.WriteJson(json);
    if (!written.ok()) {
      std::fprintf(stderr, "%s: %s\n", name, written.ToString().c_str());
      return 1;
    }
  }
  return report.passed() ? 0 : 1;
}

}  // namespace baton::samples
