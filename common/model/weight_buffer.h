// WeightBuffer: the storage of one weight tensor's F32 values. It either owns its floats (a
// std::vector<float>) or is a read-only view into a mapped checkpoint file, so that loading
// an F32 checkpoint copies nothing and a page of weights costs memory only once something
// reads it (and then as page cache the kernel may reclaim, not as private memory).
//
// It behaves as a std::vector<float> value: copies compare equal and are independent. A view
// stays a view while only read; the first mutable access (non-const data(), operator[],
// begin(), resize, assign, insert, ...) turns it into an owned copy first (copy on write), so
// a write can never reach the file or another view of it. Copying a view shares the mapping,
// which is safe for the same reason. A view holds the mapping alive (shared_ptr), so a model
// outlives the checkpoint object it was loaded from.
#ifndef SCD_COMMON_MODEL_WEIGHT_BUFFER_H_
#define SCD_COMMON_MODEL_WEIGHT_BUFFER_H_

#include <cstddef>
#include <initializer_list>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/base/mapped_file.h"

namespace scd {

class WeightBuffer {
 public:
  using value_type = float;
  using size_type = size_t;
  using difference_type = std::ptrdiff_t;
  using reference = float&;
  using const_reference = const float&;
  using pointer = float*;
  using const_pointer = const float*;
  using iterator = float*;
  using const_iterator = const float*;

  WeightBuffer() = default;
  WeightBuffer(std::vector<float> values) : owned_(std::move(values)) {}  // NOLINT: as vector
  WeightBuffer(std::initializer_list<float> values) : owned_(values) {}
  explicit WeightBuffer(size_t n, float value = 0.0f) : owned_(n, value) {}
  template <typename It, typename = decltype(*std::declval<It>())>
  WeightBuffer(It first, It last) : owned_(first, last) {}

  WeightBuffer(const WeightBuffer&) = default;
  WeightBuffer(WeightBuffer&& other) noexcept;
  WeightBuffer& operator=(const WeightBuffer& other);
  WeightBuffer& operator=(WeightBuffer&& other) noexcept;
  WeightBuffer& operator=(std::vector<float> values);
  WeightBuffer& operator=(std::initializer_list<float> values);

  // A view of `count` floats at byte `offset` of `file`. InvalidArgument when the range runs
  // past the file or `offset` is not a multiple of 4 (the floats would be misaligned).
  static absl::StatusOr<WeightBuffer> MapView(std::shared_ptr<const MappedFile> file, size_t offset,
                                              size_t count);

  // True while this is a view into a mapped file (no owned floats).
  bool is_mapped() const { return file_ != nullptr; }

  // Read access never copies.
  const float* data() const { return file_ ? view_ : owned_.data(); }
  size_t size() const { return file_ ? view_size_ : owned_.size(); }
  bool empty() const { return size() == 0; }
  const float* begin() const { return data(); }
  const float* end() const { return data() + size(); }
  const float* cbegin() const { return begin(); }
  const float* cend() const { return end(); }
  const float& operator[](size_t i) const { return data()[i]; }
  const float& front() const { return data()[0]; }
  const float& back() const { return data()[size() - 1]; }

  // Mutable access: a view first becomes an owned copy.
  float* data() { return MutableVector().data(); }
  float* begin() { return data(); }
  float* end() { return data() + size(); }
  float& operator[](size_t i) { return data()[i]; }
  float& front() { return data()[0]; }
  float& back() { return data()[size() - 1]; }
  void resize(size_t n) { MutableVector().resize(n); }
  void resize(size_t n, float value) { MutableVector().resize(n, value); }
  void assign(size_t n, float value);
  template <typename It>
  void assign(It first, It last) {
    std::vector<float> values(first, last);  // `first` may point into this buffer
    *this = std::move(values);
  }
  template <typename It>
  float* insert(const float* pos, It first, It last) {
    const size_t at = static_cast<size_t>(pos - data());
    std::vector<float>& v = MutableVector();
    std::vector<float> values(first, last);  // `first` may point into this buffer
    return v.data() + (v.insert(v.begin() + at, values.begin(), values.end()) - v.begin());
  }
  void push_back(float value) { MutableVector().push_back(value); }
  void pop_back() { MutableVector().pop_back(); }
  void reserve(size_t n) { MutableVector().reserve(n); }
  void clear();

  // The owned vector, copied out of the mapping first if this is a view; for code that needs
  // a std::vector<float>& (resizing into huge pages, swapping in results).
  std::vector<float>& MutableVector();

  // For a view: drops the resident copies of the whole pages inside it (madvise
  // MADV_DONTNEED). The mapping is private and read-only, so nothing is lost: a later read
  // faults the page back in from the file. A backend that converts the weights to its own
  // format at load calls this so that the F32 pages stop counting in its resident memory.
  // No effect on an owned buffer.
  void ReleasePages() const;

 private:
  std::vector<float> owned_;
  std::shared_ptr<const MappedFile> file_;  // set only for a view
  const float* view_ = nullptr;
  size_t view_size_ = 0;
};

bool operator==(const WeightBuffer& a, const WeightBuffer& b);
inline bool operator!=(const WeightBuffer& a, const WeightBuffer& b) { return !(a == b); }
bool operator==(const WeightBuffer& a, const std::vector<float>& b);
inline bool operator==(const std::vector<float>& a, const WeightBuffer& b) { return b == a; }
inline bool operator!=(const WeightBuffer& a, const std::vector<float>& b) { return !(a == b); }
inline bool operator!=(const std::vector<float>& a, const WeightBuffer& b) { return !(b == a); }

}  // namespace scd

#endif  // SCD_COMMON_MODEL_WEIGHT_BUFFER_H_
