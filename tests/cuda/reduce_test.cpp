// Warp and block reductions and scans (cuda/common/reduce.cuh) against sums computed on the host,
// and the properties the kernels rely on: every thread gets the same bits, and the scattered
// multi-value warp sum is bitwise the plain butterfly sum of each slot.
#include <algorithm>
#include <cstring>
#include <numeric>
#include <vector>

#include "reduce_kernels.hpp"
#include "support.hpp"

namespace {

using specdec::test::DeviceBuffer;
using specdec::test::for_each_order;
using specdec::test::random_floats;
namespace reduce = specdec::test::reduce;

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

}  // namespace

TEST_CASE("block sum, max and argmax", "[cuda-emu][reduce]") {
  for_each_order([] {
    for (int threads : {32, 64, 160}) {
      for (int n : {1, 31, 100, 1000}) {
        INFO("threads " << threads << ", n " << n);
        auto values = random_floats(static_cast<std::size_t>(n), 7u + static_cast<unsigned>(n));
        if (n > 40) values[37] = values[12] = 5.0f;  // a tied maximum: the first index wins
        DeviceBuffer<float> in(values);
        DeviceBuffer<float> sum(static_cast<std::size_t>(threads));
        DeviceBuffer<float> max(static_cast<std::size_t>(threads));
        DeviceBuffer<int> argmax(static_cast<std::size_t>(threads));
        reduce::block_reductions(in.get(), n, threads, sum.get(), max.get(), argmax.get());
        const auto s = sum.download();
        const auto m = max.download();
        const auto a = argmax.download();

        const double ref_sum = std::accumulate(values.begin(), values.end(), 0.0);
        const auto ref_max = std::max_element(values.begin(), values.end());
        CHECK(std::abs(s[0] - ref_sum) <= 1e-5 * n);
        CHECK(m[0] == *ref_max);
        CHECK(a[0] == ref_max - values.begin());
        for (int t = 1; t < threads; ++t) {
          REQUIRE(same_bits(s[t], s[0]));
          REQUIRE(same_bits(m[t], m[0]));
          REQUIRE(a[t] == a[0]);
        }
      }
    }
  });
}

TEST_CASE("block scan", "[cuda-emu][reduce]") {
  for_each_order([] {
    for (int threads : {32, 96, 256}) {
      INFO("threads " << threads);
      // Small integers: every partial sum is exact, so the comparison can be exact.
      std::vector<float> values(static_cast<std::size_t>(threads));
      for (int i = 0; i < threads; ++i) values[i] = static_cast<float>((i * 7919) % 13 - 6);
      DeviceBuffer<float> in(values);
      DeviceBuffer<float> inclusive(values.size());
      DeviceBuffer<float> exclusive(values.size());
      DeviceBuffer<float> total(values.size());
      reduce::block_scan(in.get(), threads, inclusive.get(), exclusive.get(), total.get());
      const auto inc = inclusive.download();
      const auto exc = exclusive.download();
      const auto tot = total.download();
      float running = 0.0f;
      for (int i = 0; i < threads; ++i) {
        REQUIRE(exc[i] == running);
        running += values[i];
        REQUIRE(inc[i] == running);
      }
      for (int i = 0; i < threads; ++i) REQUIRE(tot[i] == running);
    }
  });
}

TEST_CASE("scattered warp sums equal plain butterfly sums bit for bit", "[cuda-emu][reduce]") {
  for_each_order([] {
    for (int width : {32, 16}) {
      for (int slots = 1; slots <= width; slots *= 2) {
        INFO("width " << width << " slots " << slots);
        const auto values =
            random_floats(32u * static_cast<unsigned>(slots), 100u + slots, -3.0f, 3.0f);
        DeviceBuffer<float> in(values);
        DeviceBuffer<float> scattered(32);
        DeviceBuffer<float> plain(values.size());
        reduce::warp_sums(in.get(), slots, width, scattered.get(), plain.get());
        const auto sc = scattered.download();
        const auto pl = plain.download();
        int shift = 0;
        while ((slots << shift) < width) ++shift;
        for (int lane = 0; lane < 32; ++lane) {
          const int slot = (lane % width) >> shift;
          const int group = lane / width * width;
          INFO("lane " << lane << " slot " << slot);
          REQUIRE(same_bits(sc[lane], pl[lane * slots + slot]));
          REQUIRE(
              same_bits(pl[lane * slots + slot], pl[group * slots + slot]));  // the group agrees
          double ref = 0.0;
          for (int l = group; l < group + width; ++l) ref += values[l * slots + slot];
          REQUIRE(std::abs(sc[lane] - ref) <= 1e-5);
        }
      }
    }
  });
}

TEST_CASE("warp sums over sub-warp groups", "[cuda-emu][reduce]") {
  const auto values = random_floats(32, 5u);
  DeviceBuffer<float> in(values);
  DeviceBuffer<float> out(32);
  for (int width : {1, 2, 4, 8, 16, 32}) {
    reduce::warp_group_sums(in.get(), width, out.get());
    const auto got = out.download();
    for (int lane = 0; lane < 32; ++lane) {
      double ref = 0.0;
      for (int l = lane / width * width; l < lane / width * width + width; ++l) ref += values[l];
      INFO("width " << width << " lane " << lane);
      REQUIRE(std::abs(got[lane] - ref) <= 1e-6);
    }
  }
}
