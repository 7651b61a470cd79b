// Template-heavy translation unit: deep instantiation chains, heavy headers.
#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <regex>
#include <string>
#include <tuple>
#include <unordered_map>
#include <variant>
#include <vector>

template <int N> struct Fib { static constexpr long value = Fib<N - 1>::value + Fib<N - 2>::value; };
template <> struct Fib<1> { static constexpr long value = 1; };
template <> struct Fib<0> { static constexpr long value = 0; };

template <int N, typename... Ts> struct Stack : Stack<N - 1, Ts..., std::array<char, N>> {
	std::tuple<Ts...> items;
	auto sum() const { return std::apply([](auto const&... x) { return (sizeof(x) + ... + 0); }, items) + Stack<N - 1, Ts..., std::array<char, N>>::sum(); }
};
template <typename... Ts> struct Stack<0, Ts...> { auto sum() const { return std::size_t{0}; } };

template <int I> int visit_all(std::variant<int, long, double, std::string> const& v) {
	return std::visit([](auto const& x) { return int(sizeof(x)) + I; }, v) + visit_all<I - 1>(v);
}
template <> int visit_all<0>(std::variant<int, long, double, std::string> const&) { return 0; }

template <int I> struct Node {
	std::map<std::string, std::vector<std::function<int(int)>>> m;
	int run(int x) {
		for (auto& [k, fs] : m)
			for (auto& f : fs) x = f(x) + int(k.size());
		std::sort(m.begin()->second.begin(), m.begin()->second.end(), [](auto&, auto&) { return false; });
		return Node<I - 1>{}.run(x) + visit_all<I % 40 + 1>(x);
	}
};
template <> struct Node<0> { int run(int x) { return x; } };

int entry(const std::string& s) {
	
	std::unordered_map<std::string, int> u{{s, 1}};
	return Node<12>{}.run(int(s.size())) + int(Stack<16>{}.sum()) + int(Fib<80>::value % 7) + u[s];
}
