// The seed of a test binary's random inputs, one per process:
// BATON_TEST_SEED when set (decimal, or hex with 0x), otherwise drawn once
// from std::random_device. A test that draws random inputs seeds its
// generator from it when it starts and names it in every failure
// (SCOPED_TRACE(TestSeedNote()), or a fixture's ::testing::ScopedTrace), so
//   BATON_TEST_SEED=<seed> <test binary> --gtest_filter=<the failed test>
// draws the same inputs again. Header-only, without gtest or CUDA, so the
// checkpoint tests share it.
#pragma once

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>

namespace baton::testing {

// A BATON_TEST_SEED that is not an unsigned 64-bit integer ends the process
// with a message: a replay must not quietly draw other inputs.
inline std::uint64_t TestSeed() {
  static const std::uint64_t seed = [] {
    const char* env = std::getenv("BATON_TEST_SEED");
    if (env == nullptr || *env == '\0') {
      std::random_device device;
      return (std::uint64_t{device()} << 32) | device();
    }
    char* end = nullptr;
    errno = 0;
    const unsigned long long value = std::strtoull(env, &end, 0);
    if (errno != 0 || *end != '\0' || *env == '-') {
      std::fprintf(stderr, "BATON_TEST_SEED=%s is not an unsigned 64-bit integer\n", env);
      std::exit(2);
    }
    return std::uint64_t{value};
  }();
  return seed;
}

// What a failure says about the inputs: the seed and how to replay them.
inline std::string TestSeedNote() {
  const std::string seed = std::to_string(TestSeed());
  return "random inputs from seed " + seed + " (BATON_TEST_SEED=" + seed + " replays them)";
}

}  // namespace baton::testing
