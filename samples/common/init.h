// Command-line set-up and the common ending of every sample: Abseil flags with
// a --help that lists the sample's own flags (Abseil's default only lists
// flags defined in a file named after the program), one --json flag, the
// table and verdict, and the exit code.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/report.h"

namespace baton::samples {

// Sets the usage message, parses flags (exits on --help or bad flags).
void InitSample(int argc, char** argv, const char* usage);

// InitSample, then `run`, then prints the report, writes --json FILE when
// given, and returns the exit code: 0 Passed, 1 failed (or an error),
// 2 no usable GPU (FailedPrecondition).
int RunSample(int argc, char** argv, const char* name, const char* usage,
              const std::function<absl::Status(Report&)>& run);

// A comma-separated list of integers >= 1 (e.g. --batches=1,8); the error
// names the flag `--name` and the bad part.
absl::StatusOr<std::vector<std::uint32_t>> ParsePositiveList(const std::string& flag,
                                                             const char* name);

}  // namespace baton::samples
