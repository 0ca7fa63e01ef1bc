// decode_loop's report of an engine's tokens that differ from the host
// loop's (samples/decode_loop/token_diff.h): the count of differing
// requests, and where the first one diverges, for every way two runs differ.
#include "decode_loop/token_diff.h"

#include <gtest/gtest.h>

namespace baton::samples {
namespace {

TEST(DescribeTokenDifference, EqualRunsSayNothing) {
  const TokensByEntry run = {{0, {5, 6, 7}}, {3, {9}}};
  EXPECT_EQ(DescribeTokenDifference(run, run), "");
  EXPECT_EQ(DescribeTokenDifference({}, {}), "");
}

TEST(DescribeTokenDifference, NamesTheCountAndTheFirstDivergingToken) {
  const TokensByEntry host = {{0, {5, 6, 7}}, {1, {1, 2, 3, 4}}, {2, {8, 8}}, {4, {0, 0}}};
  TokensByEntry engine = host;
  engine[1][2] = 30;  // entry 1 diverges at token 2
  engine[4][0] = 1;   // entry 4 at token 0
  EXPECT_EQ(DescribeTokenDifference(host, engine),
            "2 of 4 requests differ; the first, entry 1, at token 2 of 4 (host 3, engine 30)");
}

TEST(DescribeTokenDifference, NamesALengthDifference) {
  const TokensByEntry host = {{7, {1, 2, 3}}};
  const TokensByEntry engine = {{7, {1, 2}}};
  EXPECT_EQ(DescribeTokenDifference(host, engine),
            "1 of 1 requests differ; the first, entry 7, in length (host 3 tokens, engine 2)");
}

TEST(DescribeTokenDifference, CountsEntriesOnlyOneSideCompleted) {
  const TokensByEntry host = {{0, {1}}, {2, {4}}};
  const TokensByEntry engine = {{0, {1}}, {1, {3}}};
  EXPECT_EQ(DescribeTokenDifference(host, engine),
            "2 of 3 requests differ; the first, entry 1, which only the engine completed");
  EXPECT_EQ(DescribeTokenDifference(engine, host),
            "2 of 3 requests differ; the first, entry 1, which only the host loop completed");
}

}  // namespace
}  // namespace baton::samples
