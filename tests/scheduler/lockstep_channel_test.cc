// The tensor-parallel lockstep channel (src/scheduler/lockstep_channel.h) on
// the host: a leader thread and follower threads over host memory, with
// followers that lag at random and one that stalls like a delayed host. Every
// follower must copy every record in order and whole, the leader must never
// run more than two records ahead of any follower, a stalled follower must
// time the leader out naming it, and a fault raised by any rank must end
// every wait with that rank.
#include "scheduler/lockstep_channel.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace baton::detail {
namespace {

constexpr int kWords = 48;

// A channel and its two halves of kWords words, zeroed as the device memory
// is before the first step.
struct Channel : LockstepChannel {
  std::uint32_t storage[2][kWords] = {};
  LockstepHalves halves{&storage[0][0], kWords};
};

// Record s's word i: the step in word 0, then words no other record has.
std::uint32_t Word(std::uint64_t s, int i) {
  if (i == 0) return static_cast<std::uint32_t>(s);
  std::uint64_t h =
      s * 0x9E3779B97F4A7C15ull + static_cast<std::uint64_t>(i) * 0xBF58476D1CE4E5B9ull;
  h ^= h >> 31;
  return static_cast<std::uint32_t>(h);
}

// Waits up to `seconds`, yielding between polls.
struct Deadline {
  std::chrono::steady_clock::time_point end;
  explicit Deadline(double seconds)
      : end(std::chrono::steady_clock::now() +
            std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                std::chrono::duration<double>(seconds))) {}
  bool operator()() const {
    std::this_thread::yield();
    return std::chrono::steady_clock::now() < end;
  }
};

std::unique_ptr<Channel> MakeChannel() {
  auto c = std::make_unique<Channel>();
  static_cast<LockstepChannel&>(*c) = LockstepChannel{};
  return c;
}

TEST(LockstepChannel, EveryFollowerCopiesEveryRecordInOrderAndWhole) {
  constexpr int kFollowers = 3;
  constexpr std::uint64_t kRecords = 20000;
  const std::uint64_t seed = std::random_device{}();
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  auto channel = MakeChannel();
  std::atomic<bool> failed{false};
  std::vector<std::string> errors(kFollowers + 1);
  std::vector<std::thread> threads;
  for (int r = 0; r < kFollowers; ++r) {
    threads.emplace_back([&, r] {
      std::mt19937_64 rng(seed + r);
      std::uint32_t copy[kWords];
      for (std::uint64_t s = 1; s <= kRecords && !failed; ++s) {
        if (follower_acquire(*channel, s, Deadline(10.0)) != LockstepWait::kReady) {
          errors[r] =
              "follower " + std::to_string(r) + " gave up waiting for record " + std::to_string(s);
          failed = true;
          return;
        }
        // The leader can be at most one record ahead of a follower that has
        // not copied this one (record s + 2 needs this half back).
        const std::uint64_t published =
            cuda::atomic_ref<std::uint64_t, cuda::thread_scope_system>(channel->published).load();
        const std::uint32_t* half = channel->halves.of(s);
        for (int i = 0; i < kWords; ++i) copy[i] = half[i];
        if (r == 1 && s % 97 == 0) {  // a follower whose host is slow now and then
          std::this_thread::sleep_for(std::chrono::microseconds(200));
        } else if (rng() % 8 == 0) {
          std::this_thread::yield();
        }
        for (int i = 0; i < kWords; ++i) {
          if (copy[i] != Word(s, i)) {
            errors[r] = "follower " + std::to_string(r) + " read word " + std::to_string(i) +
                        " of record " + std::to_string(s) + " torn or out of order";
            failed = true;
            return;
          }
        }
        follower_release(*channel, r, s);
        if (published > s + 1) {
          errors[r] = "the leader published record " + std::to_string(published) +
                      " while follower " + std::to_string(r) + " held record " + std::to_string(s);
          failed = true;
          return;
        }
      }
    });
  }
  threads.emplace_back([&] {
    std::mt19937_64 rng(seed);
    for (std::uint64_t s = 1; s <= kRecords && !failed; ++s) {
      int lagging = -1;
      if (leader_claim(*channel, kFollowers, s, Deadline(10.0), lagging) != LockstepWait::kReady) {
        errors[kFollowers] = "the leader gave up claiming record " + std::to_string(s);
        failed = true;
        return;
      }
      std::uint32_t* half = channel->halves.of(s);
      for (int i = 0; i < kWords; ++i) half[i] = Word(s, i);
      if (rng() % 16 == 0) std::this_thread::yield();
      leader_publish(*channel, s);
    }
  });
  for (std::thread& t : threads) t.join();
  for (const std::string& e : errors) EXPECT_EQ(e, "");
  for (int r = 0; r < kFollowers; ++r) EXPECT_EQ(channel->copied[r], kRecords) << "follower " << r;
  EXPECT_EQ(lockstep_faulted_rank(*channel), -1);
}

TEST(LockstepChannel, AStalledFollowerTimesTheLeaderOutNamingIt) {
  auto channel = MakeChannel();
  constexpr int kFollowers = 3;
  int lagging = -1;
  for (std::uint64_t s = 1; s <= 7; ++s) {
    ASSERT_EQ(leader_claim(*channel, kFollowers, s, Deadline(1.0), lagging), LockstepWait::kReady)
        << "record " << s;
    ASSERT_EQ(channel->halves.of(s), &channel->storage[s % 2][0]);
    leader_publish(*channel, s);
    // Followers 0 and 2 keep up; follower 1 stops after record 5.
    for (int r = 0; r < kFollowers; ++r) {
      if (r != 1 || s <= 5) follower_release(*channel, r, s);
    }
  }
  // Record 8 reuses record 6's half, which follower 1 never copied.
  int polls = 0;
  EXPECT_EQ(leader_claim(
                *channel, kFollowers, 8, [&] { return ++polls < 100; }, lagging),
            LockstepWait::kTimedOut);
  EXPECT_EQ(lagging, 1);
  EXPECT_EQ(polls, 100);
  follower_release(*channel, 1, 6);
  EXPECT_EQ(leader_claim(*channel, kFollowers, 8, Deadline(1.0), lagging), LockstepWait::kReady);
}

TEST(LockstepChannel, AFollowerWaitsForTheRecordItNeedsAndNoLonger) {
  auto channel = MakeChannel();
  int polls = 0;
  EXPECT_EQ(follower_acquire(*channel, 1, [&] { return ++polls < 50; }), LockstepWait::kTimedOut);
  EXPECT_EQ(polls, 50);
  leader_publish(*channel, 1);
  polls = 0;
  EXPECT_EQ(follower_acquire(*channel, 1, [&] { return ++polls < 50; }), LockstepWait::kReady);
  EXPECT_EQ(polls, 0);
  EXPECT_EQ(follower_acquire(*channel, 2, [&] { return ++polls < 50; }), LockstepWait::kTimedOut);
}

TEST(LockstepChannel, AFaultOnAnyRankEndsEveryWaitNamingTheFirstRank) {
  auto channel = MakeChannel();
  EXPECT_EQ(lockstep_faulted_rank(*channel), -1);
  // Records 1 and 2 are out. A follower waits for record 3, which never
  // comes, and the leader to claim record 3, which needs record 1 copied by
  // two followers that never copy; rank 2 faults meanwhile.
  for (std::uint64_t s = 1; s <= 2; ++s) leader_publish(*channel, s);
  LockstepWait follower = LockstepWait::kReady, leader = LockstepWait::kReady;
  std::thread waiting_follower([&] { follower = follower_acquire(*channel, 3, Deadline(30.0)); });
  std::thread waiting_leader([&] {
    int lagging = -1;
    leader = leader_claim(*channel, 2, 3, Deadline(30.0), lagging);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(lockstep_raise_fault(*channel, 2), 2);
  EXPECT_EQ(lockstep_raise_fault(*channel, 1), 2) << "the first fault is the one reported";
  const auto start = std::chrono::steady_clock::now();
  waiting_follower.join();
  waiting_leader.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5))
      << "the fault, not the 30 s deadline, ended the waits";
  EXPECT_EQ(follower, LockstepWait::kFaulted);
  EXPECT_EQ(leader, LockstepWait::kFaulted);
  EXPECT_EQ(lockstep_faulted_rank(*channel), 2);
  EXPECT_EQ(follower_acquire(*channel, 5, Deadline(30.0)), LockstepWait::kFaulted);
}

}  // namespace
}  // namespace baton::detail
