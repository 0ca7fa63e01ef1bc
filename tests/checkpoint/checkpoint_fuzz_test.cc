// Fuzz test of the checkpoint loader: mutated checkpoints (byte flips and
// overwrites in the length field and the safetensors header, truncations,
// structured edits of the header, config.json and the shard index) go through
// Checkpoint::FromMemory in a build with AddressSanitizer and
// UndefinedBehaviorSanitizer. Any crash or sanitizer report aborts the
// process, which fails the test; every refusal must be InvalidArgument or
// NotFound with a message; every acceptance must hand out views whose bytes
// can all be read.
//
// Seed: --seed=N or BATON_FUZZ_SEED (default: clock). Iterations: --iterations=N
// or BATON_FUZZ_ITERATIONS (default 100000). BATON_FUZZ_ONLY=i replays the
// single iteration i of a seed (each iteration draws from its own generator).
// Threads: BATON_FUZZ_THREADS (default 2, the CI machine's cores); the
// outcome table does not depend on it.
#include <sanitizer/common_interface_defs.h>
#include <time.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "checkpoint/checkpoint.h"
#include "checkpoint/convert.h"
#include "fuzz_mutations.h"
#include "tiny_checkpoint.h"

namespace baton::checkpoint {
namespace {

using namespace fuzz;  // Rng, Base, Input, Below and the Kind enumerators

std::uint64_t g_seed = 0;
std::uint64_t g_iterations = 100'000;
std::int64_t g_only = -1;

unsigned g_threads = 2;

// What the death callback prints, so a sanitizer abort names its input (the
// callback runs on the thread that failed).
thread_local std::int64_t t_current_iteration = -1;
thread_local int t_current_kind = -1;

void OnSanitizerDeath() {
  std::fprintf(stderr,
               "checkpoint_fuzz_test: died at iteration %lld (%s); replay with "
               "BATON_FUZZ_SEED=%llu BATON_FUZZ_ONLY=%lld\n",
               static_cast<long long>(t_current_iteration),
               t_current_kind >= 0 ? kKindNames[t_current_kind] : "?",
               static_cast<unsigned long long>(g_seed),
               static_cast<long long>(t_current_iteration));
}

// Reads every byte of every view an accepted checkpoint hands out, so a view
// past its buffer trips AddressSanitizer, and checks the views' sizes. Returns
// what is wrong, or an empty string.
std::string CheckAccepted(const Checkpoint& checkpoint) {
  const ModelSpec& spec = checkpoint.spec();
  if (spec.head_dim % 2 != 0 || spec.num_heads % spec.num_kv_heads != 0) {
    return "accepted a spec with inconsistent heads";
  }
  unsigned sum = 0;
  std::size_t total = 0;
  for (const ExpectedTensor& e : ExpectedTensors(spec)) {
    const TensorView& view = checkpoint.tensor(e.name);
    std::size_t elements = 1;
    for (std::int64_t d : e.shape) elements *= static_cast<std::size_t>(d);
    if (view.shape != e.shape || view.bytes != elements * DTypeSize(view.dtype)) {
      return "accepted tensor " + e.name + " with the wrong shape or size";
    }
    for (std::size_t i = 0; i < view.bytes; ++i) sum += view.data[i];
    total += view.bytes;
  }
  if (total != checkpoint.weight_bytes()) return "weight_bytes disagrees with the tensors";
  const TensorView& norm = checkpoint.tensor("model.norm.weight");
  std::vector<std::uint16_t> out(NumElements(norm));
  const absl::Status converted = ConvertTensor(norm, DType::kFloat16, out.data());
  if (!converted.ok() && converted.message().empty()) return "ConvertTensor without a message";
  volatile unsigned sink = sum;
  (void)sink;
  return "";
}

// Columns: accepted, InvalidArgument, NotFound, other code.
struct Tally {
  std::array<std::array<std::uint64_t, 4>, kKinds> table{};
  std::array<double, kKinds> seconds{};
  std::vector<std::string> failures;  // the first few
  std::uint64_t failure_count = 0;
};

double ThreadCpuSeconds() {
  timespec now{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) + 1e-9 * static_cast<double>(now.tv_nsec);
}

void RunIteration(std::uint64_t i, const std::vector<Base>& bases, Tally& tally) {
  const double start = ThreadCpuSeconds();
  Rng rng(g_seed ^ (0x9e3779b97f4a7c15ull * (i + 1)));
  const Base& base = bases[Below(rng, bases.size())];
  Input in{base.checkpoint.config_json, base.checkpoint.files};
  // Deep nesting costs ~50x a flat mutation under the sanitizers and
  // unmutated inputs are only the control: 2% each; the other kinds share the
  // rest evenly.
  const std::uint64_t roll = Below(rng, 50);
  const int kind = roll == 0   ? kDeepNesting
                   : roll == 1 ? kUnmutated
                               : 1 + static_cast<int>(Below(rng, kDeepNesting - 1));
  t_current_iteration = static_cast<std::int64_t>(i);
  t_current_kind = kind;
  Mutate(static_cast<Kind>(kind), rng, base, in);
  absl::StatusOr<Checkpoint> loaded =
      Checkpoint::FromMemory(std::move(in.config), std::move(in.files), "fuzz");
  int column = 3;
  std::string problem;
  if (loaded.ok()) {
    column = 0;
    problem = CheckAccepted(*loaded);
  } else if (loaded.status().code() == absl::StatusCode::kInvalidArgument) {
    column = 1;
  } else if (loaded.status().code() == absl::StatusCode::kNotFound) {
    column = 2;
  }
  if (!loaded.ok() && loaded.status().message().empty()) problem = "a refusal without a message";
  if (column == 3) problem = "a refusal with an unexpected code";
  if (kind == kUnmutated && !loaded.ok()) problem = "the unmutated checkpoint was refused";
  ++tally.table[kind][column];
  tally.seconds[kind] += ThreadCpuSeconds() - start;
  if (!problem.empty() && tally.failure_count++ < 10) {
    std::ostringstream text;
    text << "iteration " << i << " (" << kKindNames[kind] << "): " << problem << ": "
         << loaded.status();
    tally.failures.push_back(text.str());
  }
}

void PrintRow(const char* name, const std::array<std::uint64_t, 4>& row, double seconds) {
  std::printf("%-14s %10llu %16llu %10llu %8llu %9.1f\n", name,
              static_cast<unsigned long long>(row[0]), static_cast<unsigned long long>(row[1]),
              static_cast<unsigned long long>(row[2]), static_cast<unsigned long long>(row[3]),
              seconds);
}

TEST(CheckpointFuzz, MutatedCheckpointsAreRefusedCleanly) {
  const std::uint64_t first = g_only >= 0 ? static_cast<std::uint64_t>(g_only) : 0;
  const std::uint64_t last = g_only >= 0 ? first + 1 : g_iterations;
  const unsigned threads = g_only >= 0 ? 1 : g_threads;
  std::printf("checkpoint fuzz: BATON_FUZZ_SEED=%llu iterations=%llu threads=%u\n",
              static_cast<unsigned long long>(g_seed),
              static_cast<unsigned long long>(last - first), threads);
  const std::vector<Base> bases = MakeBases(g_seed);
  const auto start = std::chrono::steady_clock::now();
  // Each iteration draws from its own generator, so the outcome does not
  // depend on the number of threads.
  std::vector<Tally> tallies(threads);
  std::vector<std::thread> workers;
  for (unsigned t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      for (std::uint64_t i = first + t; i < last; i += threads) RunIteration(i, bases, tallies[t]);
    });
  }
  for (std::thread& w : workers) w.join();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  Tally sum;
  for (const Tally& t : tallies) {
    for (int k = 0; k < kKinds; ++k) {
      for (int c = 0; c < 4; ++c) sum.table[k][c] += t.table[k][c];
      sum.seconds[k] += t.seconds[k];
    }
    sum.failure_count += t.failure_count;
    for (const std::string& f : t.failures) ADD_FAILURE() << f;
  }
  std::printf("%-14s %10s %16s %10s %8s %9s\n", "mutation", "accepted", "InvalidArgument",
              "NotFound", "other", "cpu s");
  std::array<std::uint64_t, 4> totals{};
  double cpu = 0;
  for (int k = 0; k < kKinds; ++k) {
    PrintRow(kKindNames[k], sum.table[k], sum.seconds[k]);
    for (int c = 0; c < 4; ++c) totals[c] += sum.table[k][c];
    cpu += sum.seconds[k];
  }
  PrintRow("total", totals, cpu);
  std::printf("checkpoint fuzz: %llu checkpoints in %.1f s wall, 0 crashes, %llu failures\n",
              static_cast<unsigned long long>(last - first), seconds,
              static_cast<unsigned long long>(sum.failure_count));
  EXPECT_EQ(sum.failure_count, 0u);
}

std::uint64_t ParseNumber(const char* text, std::uint64_t fallback) {
  if (text == nullptr || *text == '\0') return fallback;
  return std::strtoull(text, nullptr, 0);
}

}  // namespace
}  // namespace baton::checkpoint

int main(int argc, char** argv) {
  using namespace baton::checkpoint;
  ::testing::InitGoogleTest(&argc, argv);
  g_seed = ParseNumber(
      std::getenv("BATON_FUZZ_SEED"),
      static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()));
  g_iterations = ParseNumber(std::getenv("BATON_FUZZ_ITERATIONS"), g_iterations);
  if (const char* only = std::getenv("BATON_FUZZ_ONLY"); only != nullptr && *only != '\0') {
    g_only = static_cast<std::int64_t>(std::strtoll(only, nullptr, 0));
  }
  g_threads = static_cast<unsigned>(ParseNumber(std::getenv("BATON_FUZZ_THREADS"), 2));
  if (g_threads == 0) g_threads = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--seed=", 0) == 0) g_seed = ParseNumber(arg.c_str() + 7, g_seed);
    if (arg.rfind("--iterations=", 0) == 0)
      g_iterations = ParseNumber(arg.c_str() + 13, g_iterations);
  }
  __sanitizer_set_death_callback(OnSanitizerDeath);
  return RUN_ALL_TESTS();
}
