// See weight_buffer.h. A view keeps `owned_` empty and points `view_` into the mapping that
// `file_` holds alive; `file_ != nullptr` is what makes a buffer a view.
#include "common/model/weight_buffer.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace scd {

WeightBuffer::WeightBuffer(WeightBuffer&& other) noexcept
    : owned_(std::move(other.owned_)),
      file_(std::move(other.file_)),
      view_(other.view_),
      view_size_(other.view_size_) {
  other.owned_.clear();
  other.view_ = nullptr;
  other.view_size_ = 0;
}

WeightBuffer& WeightBuffer::operator=(const WeightBuffer& other) {
  if (this == &other) return *this;
  if (other.file_ != nullptr) {
    std::vector<float>().swap(owned_);  // a view owns nothing: free, don't just empty
  } else {
    owned_ = other.owned_;
  }
  file_ = other.file_;
  view_ = other.view_;
  view_size_ = other.view_size_;
  return *this;
}

WeightBuffer& WeightBuffer::operator=(WeightBuffer&& other) noexcept {
  if (this == &other) return *this;
  owned_ = std::move(other.owned_);
  file_ = std::move(other.file_);
  view_ = other.view_;
  view_size_ = other.view_size_;
  other.owned_.clear();
  other.view_ = nullptr;
  other.view_size_ = 0;
  return *this;
}

WeightBuffer& WeightBuffer::operator=(std::vector<float> values) {
  owned_ = std::move(values);
  file_.reset();
  view_ = nullptr;
  view_size_ = 0;
  return *this;
}

WeightBuffer& WeightBuffer::operator=(std::initializer_list<float> values) {
  return *this = std::vector<float>(values);
}

absl::StatusOr<WeightBuffer> WeightBuffer::MapView(std::shared_ptr<const MappedFile> file,
                                                   size_t offset, size_t count) {
  if (file == nullptr) return absl::InvalidArgumentError("WeightBuffer::MapView: no file");
  if (offset % sizeof(float) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        file->path(), ": offset ", offset, " is not a multiple of 4; cannot view floats there"));
  }
  if (offset > file->size() || count > (file->size() - offset) / sizeof(float)) {
    return absl::InvalidArgumentError(absl::StrCat(file->path(), ": ", count, " floats at offset ",
                                                   offset, " run past the file (", file->size(),
                                                   " bytes)"));
  }
  WeightBuffer buffer;
  buffer.view_ = count == 0 ? nullptr : reinterpret_cast<const float*>(file->data() + offset);
  buffer.view_size_ = count;
  buffer.file_ = std::move(file);
  return buffer;
}

std::vector<float>& WeightBuffer::MutableVector() {
  if (file_ != nullptr) {
    owned_.assign(view_, view_ + view_size_);
    file_.reset();
    view_ = nullptr;
    view_size_ = 0;
  }
  return owned_;
}

void WeightBuffer::assign(size_t n, float value) { *this = std::vector<float>(n, value); }

void WeightBuffer::clear() { *this = std::vector<float>(); }

void WeightBuffer::ReleasePages() const {
  if (file_ == nullptr || view_size_ == 0) return;
  // Only the pages wholly inside the view: the partial pages at either end may hold a
  // neighbouring tensor that someone is reading (dropping them would still be safe, but would
  // cost that reader a fault).
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(view_);
  const uintptr_t end = begin + view_size_ * sizeof(float);
  const uintptr_t first = (begin + page - 1) / page * page;
  const uintptr_t last = end / page * page;
  if (last > first) ::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
}

bool operator==(const WeightBuffer& a, const WeightBuffer& b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin());
}

bool operator==(const WeightBuffer& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin());
}

}  // namespace scd
