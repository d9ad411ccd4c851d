// SmallVector: a std::vector-compatible sequence of trivially copyable values that keeps up to
// N elements inline. Shapes and strides are made and dropped several times per eager op; with
// std::vector each was a malloc/free pair, about a third of the per-op host time.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <new>
#include <type_traits>
#include <vector>

namespace cr {

template <class T, size_t N> class SmallVector {
  static_assert(std::is_trivially_copyable_v<T>, "SmallVector holds trivially copyable values");

 public:
  using value_type = T;
  using size_type = size_t;
  using iterator = T*;
  using const_iterator = const T*;
  using reference = T&;
  using const_reference = const T&;

  SmallVector() = default;
  explicit SmallVector(size_t n, const T& v = T()) { assign(n, v); }
  SmallVector(std::initializer_list<T> il) { assign(il.begin(), il.end()); }
  template <class It, class = typename std::iterator_traits<It>::iterator_category>
  SmallVector(It first, It last) { assign(first, last); }
  SmallVector(const SmallVector& o) { assign(o.begin(), o.end()); }
  // interchangeable with std::vector where older code or other libraries expect one
  template <class A> SmallVector(const std::vector<T, A>& v) { assign(v.begin(), v.end()); }
  operator std::vector<T>() const { return std::vector<T>(begin(), end()); }
  SmallVector(SmallVector&& o) noexcept { take(o); }
  SmallVector& operator=(const SmallVector& o) {
    if (this != &o) assign(o.begin(), o.end());
    return *this;
  }
  SmallVector& operator=(SmallVector&& o) noexcept {
    if (this != &o) { release(); take(o); }
    return *this;
  }
  SmallVector& operator=(std::initializer_list<T> il) { assign(il.begin(), il.end()); return *this; }
  ~SmallVector() { release(); }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  size_t capacity() const { return cap_; }
  T* data() { return ptr_; }
  const T* data() const { return ptr_; }
  T* begin() { return ptr_; }
  T* end() { return ptr_ + size_; }
  const T* begin() const { return ptr_; }
  const T* end() const { return ptr_ + size_; }
  const T* cbegin() const { return ptr_; }
  const T* cend() const { return ptr_ + size_; }
  std::reverse_iterator<T*> rbegin() { return std::reverse_iterator<T*>(end()); }
  std::reverse_iterator<T*> rend() { return std::reverse_iterator<T*>(begin()); }
  std::reverse_iterator<const T*> rbegin() const { return std::reverse_iterator<const T*>(end()); }
  std::reverse_iterator<const T*> rend() const { return std::reverse_iterator<const T*>(begin()); }
  T& operator[](size_t i) { return ptr_[i]; }
  const T& operator[](size_t i) const { return ptr_[i]; }
  T& front() { return ptr_[0]; }
  const T& front() const { return ptr_[0]; }
  T& back() { return ptr_[size_ - 1]; }
  const T& back() const { return ptr_[size_ - 1]; }

  void reserve(size_t n) {
    if (n <= cap_) return;
    size_t c = std::max(n, cap_ * 2);
    T* p = static_cast<T*>(std::malloc(c * sizeof(T)));
    if (!p) throw std::bad_alloc();
    if (size_) std::memcpy(p, ptr_, size_ * sizeof(T));
    if (ptr_ != inline_) std::free(ptr_);
    ptr_ = p;
    cap_ = c;
  }
  void clear() { size_ = 0; }
  void resize(size_t n, const T& v = T()) {
    reserve(n);
    for (size_t i = size_; i < n; ++i) ptr_[i] = v;
    size_ = n;
  }
  void push_back(const T& v) {
    if (size_ == cap_) {
      T copy = v;  // v may live inside this vector
      reserve(size_ + 1);
      ptr_[size_++] = copy;
      return;
    }
    ptr_[size_++] = v;
  }
  template <class... A> T& emplace_back(A&&... a) {
    push_back(T(std::forward<A>(a)...));
    return back();
  }
  void pop_back() { --size_; }
  void assign(size_t n, const T& v) {
    T copy = v;
    size_ = 0;
    resize(n, copy);
  }
  template <class It> void assign(It first, It last) {
    size_t n = size_t(std::distance(first, last));
    if (n > cap_) {  // the source cannot alias a buffer we are about to outgrow... copy first
      SmallVector tmp;
      tmp.reserve(n);
      for (size_t i = 0; first != last; ++first, ++i) tmp.ptr_[i] = *first;
      tmp.size_ = n;
      *this = std::move(tmp);
      return;
    }
    size_t i = 0;
    for (; first != last; ++first, ++i) ptr_[i] = *first;
    size_ = n;
  }
  T* insert(const T* pos, const T& v) { return insert(pos, size_t(1), v); }
  T* insert(const T* pos, size_t n, const T& v) {
    size_t at = size_t(pos - ptr_);
    T copy = v;
    reserve(size_ + n);
    std::memmove(ptr_ + at + n, ptr_ + at, (size_ - at) * sizeof(T));
    for (size_t i = 0; i < n; ++i) ptr_[at + i] = copy;
    size_ += n;
    return ptr_ + at;
  }
  template <class It, class = typename std::iterator_traits<It>::iterator_category>
  T* insert(const T* pos, It first, It last) {
    size_t at = size_t(pos - ptr_);
    SmallVector src(first, last);  // the range may point into this vector
    size_t n = src.size();
    reserve(size_ + n);
    std::memmove(ptr_ + at + n, ptr_ + at, (size_ - at) * sizeof(T));
    if (n) std::memcpy(ptr_ + at, src.data(), n * sizeof(T));
    size_ += n;
    return ptr_ + at;
  }
  T* insert(const T* pos, std::initializer_list<T> il) { return insert(pos, il.begin(), il.end()); }
  T* erase(const T* pos) { return erase(pos, pos + 1); }
  T* erase(const T* first, const T* last) {
    size_t a = size_t(first - ptr_), b = size_t(last - ptr_);
    std::memmove(ptr_ + a, ptr_ + b, (size_ - b) * sizeof(T));
    size_ -= b - a;
    return ptr_ + a;
  }

  friend bool operator==(const SmallVector& a, const SmallVector& b) {
    return a.size_ == b.size_ && std::equal(a.begin(), a.end(), b.begin());
  }
  friend bool operator!=(const SmallVector& a, const SmallVector& b) { return !(a == b); }
  friend bool operator<(const SmallVector& a, const SmallVector& b) {
    return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end());
  }

 private:
  void release() {
    if (ptr_ != inline_) std::free(ptr_);
    ptr_ = inline_;
    cap_ = N;
    size_ = 0;
  }
  void take(SmallVector& o) {
    if (o.ptr_ == o.inline_) {
      std::memcpy(inline_, o.inline_, o.size_ * sizeof(T));
      ptr_ = inline_;
      cap_ = N;
    } else {
      ptr_ = o.ptr_;
      cap_ = o.cap_;
    }
    size_ = o.size_;
    o.ptr_ = o.inline_;
    o.cap_ = N;
    o.size_ = 0;
  }

  T* ptr_ = inline_;
  size_t size_ = 0;
  size_t cap_ = N;
  T inline_[N];
};

}  // namespace cr
