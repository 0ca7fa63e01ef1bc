// Command-line set-up shared by the samples: Abseil flags with a --help that
// lists the sample's own flags (Abseil's default only lists flags defined in a
// file named after the program).
#pragma once

namespace baton::samples {

// Sets the usage message, parses flags (exits on --help or bad flags).
void InitSample(int argc, char** argv, const char* usage);

}  // namespace baton::samples
