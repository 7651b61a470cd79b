// Fixture for symbolize/: C++ names that need demangling — namespaces,
// class and function templates, operators, lambdas, anonymous namespaces,
// constructors and overloads. Built by scripts/symbolize-fixtures.sh.
#include <cstdio>
#include <map>
#include <string>
#include <vector>

namespace sprof {
namespace fixture {

template <typename T> class Box {
public:
	explicit Box(T v) : v_(v) {}
	__attribute__((noinline)) T get() const { return v_; }
	__attribute__((noinline)) void push(const T &x) { items_.push_back(x); }
	__attribute__((noinline)) T sum() const
	{
		T s{};
		for (const T &x : items_)
			s = s + x;
		return s;
	}
	Box operator+(const Box &o) const { return Box(v_ + o.v_); }

private:
	T v_;
	std::vector<T> items_;
};

template <typename K, typename V>
__attribute__((noinline)) V lookup(const std::map<K, V> &m, const K &k)
{
	auto it = m.find(k);
	return it == m.end() ? V{} : it->second;
}

__attribute__((noinline)) int overload(int x) { return x * 3; }
__attribute__((noinline)) double overload(double x) { return x / 3; }

struct Shape {
	virtual ~Shape() = default;
	virtual double area() const = 0;
};
struct Square : Shape {
	double s;
	explicit Square(double s) : s(s) {}
	__attribute__((noinline)) double area() const override { return s * s; }
};

} // namespace fixture
} // namespace sprof

namespace {
__attribute__((noinline)) int hidden(int x) { return x ^ 0x5a; }
} // namespace

int main(int argc, char **)
{
	using namespace sprof::fixture;
	Box<int> bi(argc);
	Box<double> bd(1.5);
	Box<std::string> bs("x");
	for (int i = 0; i < 10; i++) {
		bi.push(i);
		bd.push(i * 0.5);
		bs.push(std::to_string(i));
	}
	std::map<std::string, int> m{{"a", 1}, {"b", 2}};
	auto lambda = [&](int k) __attribute__((noinline)) { return bi.sum() + k; };
	Square sq(2);
	Shape *sh = &sq;
	double r = bi.get() + bd.sum() + lookup(m, std::string("b")) + lambda(argc) +
		   overload(argc) + overload(1.0 * argc) + sh->area() + hidden(argc) +
		   (bi + bi).get() + bs.sum().size();
	std::printf("%g\n", r);
	return 0;
}
