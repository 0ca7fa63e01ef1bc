// Conditional graphs: IF, IF/ELSE, WHILE and SWITCH built with
// ConditionalGraphBuilder, each checked by the values its bodies write into
// poisoned memory; and the builder's host-launch validation.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "baton/conditional_builder.h"
#include "baton/cuda_resources.h"
#include "baton/set_conditional.h"
#include "graph_test_kernels.h"
#include "support/gpu_test.h"
#include "support/output_words_test.h"
#include "support/test_seed.h"

namespace baton {
namespace {

using ::testing::HasSubstr;

constexpr int kSlots = 64;
constexpr std::uint32_t kPoison = 0xDEADBEEFu;

// words_: [0] condition / switch index / loop data, [1] remaining, [2] iterations.
class ConditionalGraphTest : public testing::OutputWordsTest {
 protected:
  ConditionalGraphTest() : OutputWordsTest(kSlots, kPoison) {}

  // Poisons the output, sets words_[0], runs `graph` and returns the output.
  std::vector<std::uint32_t> Run(const ConditionalGraph& graph, std::uint32_t control) {
    EXPECT_TRUE(Poison().ok());
    EXPECT_EQ(cudaMemcpy(words_.data(), &control, sizeof(control), cudaMemcpyHostToDevice),
              cudaSuccess);
    EXPECT_TRUE(graph.Launch(stream_.get()).ok());
    EXPECT_EQ(cudaStreamSynchronize(stream_.get()), cudaSuccess);
    return Out();
  }

  // A body that writes `value` to out[slot].
  SectionFiller Write(int slot, std::uint32_t value) {
    return [this, slot, value](GraphSection& body) {
      return body.Capture([&](cudaStream_t s) {
        return Launched(test::EnqueueWriteWord(out_.data() + slot, value, s));
      });
    };
  }

  std::vector<std::uint32_t> Expected(std::initializer_list<std::pair<int, std::uint32_t>> set) {
    std::vector<std::uint32_t> expected(kSlots, kPoison);
    for (const auto& [slot, value] : set) expected[slot] = value;
    return expected;
  }
};

TEST_F(ConditionalGraphTest, IfRunsTheBodyOnlyWhenTaken) {
  BATON_ASSERT_OK_AND_ASSIGN(ConditionalGraphBuilder builder,
                             ConditionalGraphBuilder::Create("if"));
  GraphSection& root = builder.root();
  BATON_ASSERT_OK_AND_ASSIGN(const cudaGraphConditionalHandle handle, root.CreateHandle());
  BATON_ASSERT_OK(root.Capture(
      [&](cudaStream_t s) { return Launched(EnqueueSetConditional(handle, words_.data(), s)); }));
  BATON_ASSERT_OK(root.If(handle, Write(0, 111)));
  // Work after the conditional runs either way.
  BATON_ASSERT_OK(Write(1, 222)(root));
  BATON_ASSERT_OK_AND_ASSIGN(ConditionalGraph graph, builder.Build(stream_.get()));
  EXPECT_EQ(graph.inventory().conditional_nodes, 1u);

  EXPECT_EQ(Run(graph, 1), Expected({{0, 111}, {1, 222}}));
  EXPECT_EQ(Run(graph, 0), Expected({{1, 222}}));
  EXPECT_EQ(Run(graph, 7), Expected({{0, 111}, {1, 222}}));  // any non-zero value takes it
}

TEST_F(ConditionalGraphTest, IfElseRunsExactlyOneBranch) {
  BATON_ASSERT_OK_AND_ASSIGN(ConditionalGraphBuilder builder, ConditionalGraphBuilder::Create());
  GraphSection& root = builder.root();
  BATON_ASSERT_OK_AND_ASSIGN(const cudaGraphConditionalHandle handle, root.CreateHandle());
  BATON_ASSERT_OK(root.Capture(
      [&](cudaStream_t s) { return Launched(EnqueueSetConditional(handle, words_.data(), s)); }));
  BATON_ASSERT_OK(root.IfElse(handle, Write(0, 111), Write(1, 333)));
  BATON_ASSERT_OK_AND_ASSIGN(ConditionalGraph graph, builder.Build(stream_.get()));

  EXPECT_EQ(Run(graph, 1), Expected({{0, 111}}));
  EXPECT_EQ(Run(graph, 0), Expected({{1, 333}}));
}

TEST_F(ConditionalGraphTest, WhileIteratesADeviceDecidedNumberOfTimes) {
  BATON_ASSERT_OK_AND_ASSIGN(ConditionalGraphBuilder builder, ConditionalGraphBuilder::Create());
  GraphSection& root = builder.root();
  BATON_ASSERT_OK_AND_ASSIGN(const cudaGraphConditionalHandle handle, root.CreateHandle());
  std::uint32_t* state = words_.data() + 1;
  BATON_ASSERT_OK(root.Capture([&](cudaStream_t s) {
    return Launched(test::EnqueueDecideLoop(words_.data(), state, handle, s));
  }));
  BATON_ASSERT_OK(root.While(handle, [&](GraphSection& body) {
    return body.Capture([&](cudaStream_t s) {
      return Launched(test::EnqueueLoopStep(state, out_.data(), handle, s));
    });
  }));
  BATON_ASSERT_OK_AND_ASSIGN(ConditionalGraph graph, builder.Build(stream_.get()));

  SCOPED_TRACE(testing::TestSeedNote());
  std::mt19937 random(static_cast<std::uint32_t>(testing::TestSeed()));
  for (int run = 0; run < 3; ++run) {
    const std::uint32_t data = random();
    const std::uint32_t count = test::WhileCount(data);
    SCOPED_TRACE(absl::StrCat("data ", data, " -> ", count, " iterations"));
    const std::vector<std::uint32_t> out = Run(graph, data);
    std::vector<std::uint32_t> expected(kSlots, kPoison);
    for (std::uint32_t i = 0; i < count; ++i) expected[i] = 1000 + i;
    EXPECT_EQ(out, expected);
    std::uint32_t words[2] = {};
    ASSERT_EQ(cudaMemcpy(words, state, sizeof(words), cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(words[0], 0u) << "remaining";
    EXPECT_EQ(words[1], count) << "iterations";
  }
}

TEST_F(ConditionalGraphTest, SwitchRunsTheIndexedBodyAndNothingOutOfRange) {
  constexpr int kBodies = 4;
  BATON_ASSERT_OK_AND_ASSIGN(ConditionalGraphBuilder builder, ConditionalGraphBuilder::Create());
  GraphSection& root = builder.root();
  BATON_ASSERT_OK_AND_ASSIGN(const cudaGraphConditionalHandle handle, root.CreateHandle());
  BATON_ASSERT_OK(root.Capture(
      [&](cudaStream_t s) { return Launched(EnqueueSetConditional(handle, words_.data(), s)); }));
  std::vector<SectionFiller> bodies;
  for (int i = 0; i < kBodies; ++i) bodies.push_back(Write(i, 500 + i));
  // Body 2 nests an IF whose handle defaults to taken: nested builders work.
  bodies[2] = [this](GraphSection& body) -> absl::Status {
    BATON_RETURN_IF_ERROR(Write(2, 502)(body));
    BATON_ASSIGN_OR_RETURN(const cudaGraphConditionalHandle inner,
                           body.CreateHandle(/*default_value=*/1));
    return body.If(inner, Write(10, 777));
  };
  BATON_ASSERT_OK(root.Switch(handle, bodies));
  BATON_ASSERT_OK_AND_ASSIGN(ConditionalGraph graph, builder.Build(stream_.get()));
  EXPECT_EQ(graph.inventory().conditional_nodes, 1u);  // the walk does not enter bodies

  for (std::uint32_t index = 0; index < kBodies; ++index) {
    SCOPED_TRACE(index);
    if (index == 2) {
      EXPECT_EQ(Run(graph, index), Expected({{2, 502}, {10, 777}}));
    } else {
      EXPECT_EQ(Run(graph, index), Expected({{static_cast<int>(index), 500 + index}}));
    }
  }
  EXPECT_EQ(Run(graph, kBodies), Expected({})) << "out of range runs nothing";
  EXPECT_EQ(Run(graph, 1000), Expected({})) << "out of range runs nothing";
}

TEST_F(ConditionalGraphTest, BuildRefusesAHostNodeAndNamesIt) {
  BATON_ASSERT_OK_AND_ASSIGN(ConditionalGraphBuilder builder,
                             ConditionalGraphBuilder::Create("engine loop"));
  BATON_ASSERT_OK(Write(0, 1)(builder.root()));
  BATON_ASSERT_OK(builder.root().Capture([&](cudaStream_t s) {
    BATON_CUDA_RETURN_IF_ERROR(cudaLaunchHostFunc(
        s, [](void*) {}, nullptr));
    return absl::OkStatus();
  }));
  const auto graph = builder.Build(stream_.get());
  ASSERT_FALSE(graph.ok());
  EXPECT_THAT(graph.status().message(),
              HasSubstr("graph 'engine loop' cannot be certified for host launch: 1 node refused"));
  EXPECT_THAT(graph.status().message(),
              HasSubstr(absl::StrCat("[node 1: host node] ", kHostNodeFix)));
}

TEST_F(ConditionalGraphTest, HandleDefaultIsAssignedAtEveryLaunch) {
  BATON_ASSERT_OK_AND_ASSIGN(ConditionalGraphBuilder builder, ConditionalGraphBuilder::Create());
  GraphSection& root = builder.root();
  BATON_ASSERT_OK_AND_ASSIGN(const cudaGraphConditionalHandle handle, root.CreateHandle(1));
  // No kernel sets this handle; cudaGraphCondAssignDefault makes it 1 each launch.
  BATON_ASSERT_OK(root.If(handle, [&](GraphSection& body) -> absl::Status {
    return body.Capture([&](cudaStream_t s) -> absl::Status {
      return Launched(test::EnqueueWriteWord(out_.data(), 5, s));
    });
  }));
  BATON_ASSERT_OK_AND_ASSIGN(ConditionalGraph graph, builder.Build(stream_.get()));
  EXPECT_EQ(Run(graph, 0), Expected({{0, 5}}));
  EXPECT_EQ(Run(graph, 0), Expected({{0, 5}}));
}

}  // namespace
}  // namespace baton
