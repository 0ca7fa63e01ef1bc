// Links the installed baton::runtime and uses its public headers.
#include <cstdio>

#include "baton/cuda_resources.h"
#include "baton/device.h"
#include "baton/status.h"

int main() {
  const absl::StatusOr<baton::DeviceInfo> info = baton::QueryDevice();
  if (!info.ok()) {
    std::printf("baton consumer: no usable device (%s)\n", info.status().ToString().c_str());
    return 0;  // linking and running is what this program checks
  }
  auto buffer = baton::DeviceBuffer<int>::Create(16);
  if (!buffer.ok()) {
    std::printf("baton consumer: %s\n", buffer.status().ToString().c_str());
    return 1;
  }
  std::printf("baton consumer: %s\n", baton::Describe(*info).c_str());
  return 0;
}
