// cuda::HostRegistration (device_memory.h): pageable host memory registered where it lies
// reads as pinned memory, for an asynchronous copy that reads it when it runs, until it is
// unregistered; a page that a live registration holds is refused (ALREADY_EXISTS), and is free
// to register again once that registration is gone. On a GPU this checks the driver does what
// the stand-ins (tests/gpu/standin/standin_memory.cc) say it does; the device zoom's kernel reading
// registered bases is gpu_sekv_test.cc's.
#include <catch2/catch.hpp>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/base/huge_pages.h"
#include "kernels/cuda/device_memory.h"
#include "tests/gpu/parity/cuda_test_support.h"

namespace scd {
namespace {

using testing::RequireOk;

TEST_CASE("HostRegistration lets the device read host memory where it lies", "[cuda]") {
  SCD_SKIP_WITHOUT_CUDA();
  constexpr size_t kFloats = 3000;  // under 3 pages: NewFloatsWithHugePages' small path
  HugeFloats host = NewFloatsWithHugePages(kFloats);
  for (size_t i = 0; i < kFloats; ++i) host[i] = static_cast<float>(i) * 0.5f;
  const size_t bytes = sizeof(float) * kFloats;
  auto reg = cuda::HostRegistration::Create(host.get(), bytes, "test floats");
  RequireOk(reg.status());
  CHECK((*reg)->size() == bytes);
  CHECK((*reg)->Contains(host.get(), bytes));
  CHECK((*reg)->Contains(host.get() + 10, sizeof(float) * 40));
  CHECK_FALSE((*reg)->Contains(host.get() + kFloats - 1, sizeof(float) * 2));
  CHECK_FALSE((*reg)->Contains(host.get() - 1, sizeof(float)));
  CHECK((*reg)->DevicePointer(host.get()) != nullptr);

  // An asynchronous copy from it reads it when it runs, as from pinned memory.
  auto stream = cuda::Stream::Create();
  RequireOk(stream.status());
  auto dev = cuda::DeviceBuffer::Allocate(bytes, "test floats");
  RequireOk(dev.status());
  RequireOk(cuda::CopyToDevice(dev->data(), host.get(), bytes, (*stream)->handle()));
  RequireOk((*stream)->Synchronize());
  std::vector<float> back(kFloats);
  RequireOk(cuda::CopyToHostSync(back.data(), dev->data(), bytes));
  for (size_t i = 0; i < kFloats; ++i) REQUIRE(back[i] == static_cast<float>(i) * 0.5f);

  // A page it holds is refused to a second registration, whole or in part.
  auto again = cuda::HostRegistration::Create(host.get() + 1000, sizeof(float) * 100, "again");
  REQUIRE_FALSE(again.ok());
  CHECK(again.status().code() == absl::StatusCode::kAlreadyExists);
  CHECK_FALSE(cuda::HostRegistration::Create(host.get(), 0, "nothing").ok());

  // Unregistered, the memory registers again.
  reg->reset();
  auto later = cuda::HostRegistration::Create(host.get() + 1000, sizeof(float) * 100, "later");
  RequireOk(later.status());
  CHECK((*later)->Contains(host.get() + 1000, sizeof(float) * 100));
}

}  // namespace
}  // namespace scd
