// The install consumer's program: the README's step program (counting_loop.cu)
// run on both graph engines against the installed package. Prints a line per
// engine and Passed, or why not; `--json FILE` writes the result for the GPU
// suite. Without a usable GPU it says so and exits 0 (it was built and
// linked, which is what such a machine can check).
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "baton/device.h"
#include "baton/runtime.h"

absl::StatusOr<std::vector<baton::Completion>> RunCountingLoop(
    baton::Engine engine, const std::vector<baton::WorkItem>& items);

namespace {

// Every item once, after exactly its payload's steps, reporting its id.
std::string Check(const std::vector<baton::WorkItem>& items,
                  const std::vector<baton::Completion>& done) {
  if (done.size() != items.size()) {
    return "expected " + std::to_string(items.size()) + " completions, got " +
           std::to_string(done.size());
  }
  std::vector<int> seen(items.size(), 0);
  for (const baton::Completion& c : done) {
    if (c.id >= items.size() || seen[c.id]++ != 0) return "id " + std::to_string(c.id) + " wrong";
    if (c.steps != items[c.id].payload || c.value != c.id) {
      return "id " + std::to_string(c.id) + " took " + std::to_string(c.steps) + " steps";
    }
  }
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  std::string json;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--json=", 0) == 0) json = arg.substr(7);
  }
  if (!baton::RequireDeviceLaunch().ok()) {
    std::printf("install consumer: built and linked; no usable GPU here (%s)\n",
                baton::RequireDeviceLaunch().ToString().c_str());
    return 0;
  }
  std::vector<baton::WorkItem> items;
  for (std::uint32_t id = 0; id < 300; ++id)
    items.push_back(baton::WorkItem::make(1, id, 1 + id % 17));
  std::string failure;
  for (baton::Engine engine : {baton::Engine::kTailLaunch, baton::Engine::kConditional}) {
    const auto done = RunCountingLoop(engine, items);
    const std::string why = done.ok() ? Check(items, *done) : done.status().ToString();
    std::printf("install consumer: %s engine: %s\n", baton::EngineName(engine),
                why.empty() ? "every item once, after its steps" : why.c_str());
    if (!why.empty() && failure.empty()) failure = why;
  }
  std::printf("%s\n", failure.empty() ? "Passed" : ("Failed: " + failure).c_str());
  if (!json.empty()) {
    if (FILE* f = std::fopen(json.c_str(), "w")) {
      std::fprintf(f, "{\"sample\": \"install_consumer\", \"passed\": %s}\n",
                   failure.empty() ? "true" : "false");
      std::fclose(f);
    }
  }
  return failure.empty() ? 0 : 1;
}
