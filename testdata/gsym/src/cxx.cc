// C++ fixture: namespaces, classes, templates, lambdas, inlining.
#include <cstdio>
#include <vector>
#include <algorithm>

namespace sprof {
namespace detail {

template <typename T>
struct Acc {
  T total{};
  void add(T v) { total += v * 3; }
  T get() const { return total; }
};

template <typename T, int N>
__attribute__((noinline)) T sum(const std::vector<T> &v) {
  Acc<T> a;
  for (const T &x : v)
    a.add(x + N);
  return a.get();
}

}  // namespace detail

class Shape {
 public:
  explicit Shape(int s) : side_(s) {}
  virtual ~Shape() = default;
  virtual int area() const { return side_ * side_; }
  __attribute__((noinline)) int scaled(int k) const {
    auto f = [k](int v) { return v * k + 1; };
    return f(area());
  }

 protected:
  int side_;
};

class Rect : public Shape {
 public:
  Rect(int a, int b) : Shape(a), other_(b) {}
  int area() const override { return side_ * other_; }

 private:
  int other_;
};

namespace cabi {
// No linkage name: LLVM names it by its scopes, "sprof::cabi::c_entry".
extern "C" __attribute__((noinline)) int c_entry(int v) { return v * 5 + 1; }
}  // namespace cabi

}  // namespace sprof

namespace {
// gcc gives no linkage name here; the symbol table has the mangled one.
__attribute__((noinline)) int hidden(int v) { return v ^ 9; }
}  // namespace

__attribute__((noinline)) int run(int n) {
  std::vector<int> v;
  for (int i = 0; i < n * 10; i++)
    v.push_back((i * 7919) % 101);
  std::sort(v.begin(), v.end(), [](int a, int b) { return a > b; });
  sprof::Rect r(n, n + 2);
  sprof::Shape *s = &r;
  return sprof::detail::sum<int, 2>(v) + s->scaled(n) + sprof::cabi::c_entry(n) + hidden(n) +
         static_cast<int>(sprof::detail::sum<double, 1>(std::vector<double>{1.5, 2.5}));
}

int main(int argc, char **) {
  std::printf("%d\n", run(argc));
  return 0;
}
