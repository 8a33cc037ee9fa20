// A method spec, "name[:key=value]...", read against the method's
// parameters: what `specdec generate --method` and a host's own command line
// take (methods/method_registry.hpp). Backend-free.
#pragma once

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "specdec/core/error.hpp"

namespace specdec {

// How a parameter's text is read (and checked when the spec is parsed).
enum class ParamType : std::uint8_t { kText, kInt, kReal, kFlag, kReals };

struct MethodParam {
  std::string key;
  ParamType type = ParamType::kText;
  std::string default_value;
  std::string help;
  bool always_in_spec = false;  // shown in spec() even at its default (the knobs a table compares)
};

// A method spec after parsing: the name and every parameter's value (the
// defaults filled in), checked against the method's parameters.
class MethodConfig {
 public:
  std::string name;

  // Reads `spec` ("name[:key=value]...", the name already known to take
  // `params`). Unknown keys, keys given twice, items that are not key=value
  // and values that do not read as their type are InvalidArgumentError naming
  // them.
  static MethodConfig parse(std::string_view spec, std::vector<MethodParam> params) {
    MethodConfig c;
    c.source_ = std::string(spec);
    std::size_t at = spec.find(':');
    c.name = std::string(spec.substr(0, at));
    c.params_ = std::move(params);
    for (const auto& p : c.params_) c.values_.push_back(p.default_value);
    c.given_.assign(c.params_.size(), false);
    while (at != std::string_view::npos) {
      const auto next = spec.find(':', at + 1);
      const auto item = spec.substr(at + 1, (next == std::string_view::npos ? spec.size() : next) - at - 1);
      const auto eq = item.find('=');
      if (eq == std::string_view::npos)
        throw InvalidArgumentError(fmt::format("method '{}': '{}' is not key=value", spec, item));
      const auto i = c.index_of(item.substr(0, eq));
      if (i == c.params_.size()) {
        std::string keys;
        for (const auto& p : c.params_) keys += (keys.empty() ? "" : ", ") + p.key;
        throw InvalidArgumentError(fmt::format("method '{}': unknown key '{}' ({} takes: {})", spec, item.substr(0, eq),
                                               c.name, keys.empty() ? "nothing" : keys));
      }
      if (c.given_[i])  // which one was meant? (the last used to win silently)
        throw InvalidArgumentError(
            fmt::format("method '{}': key '{}' is given twice", spec, c.params_[i].key));
      c.values_[i] = std::string(item.substr(eq + 1));
      c.given_[i] = true;
      at = next;
    }
    // Every value is read as its type now, so a bad one fails before any model loads.
    for (const auto& p : c.params_) {
      switch (p.type) {
        case ParamType::kInt: (void)c.int32(p.key); break;
        case ParamType::kReal: (void)c.real(p.key); break;
        case ParamType::kFlag: (void)c.flag(p.key); break;
        case ParamType::kReals: (void)c.reals(p.key); break;
        case ParamType::kText: break;
      }
    }
    return c;
  }

  // The value of `key` (as given or its default); typed getters throw
  // InvalidArgumentError naming the spec when the text does not parse.
  const std::string& text(std::string_view key) const {
    const auto i = index_of(key);
    if (i == params_.size()) throw InvalidArgumentError(fmt::format("method {} has no parameter '{}'", name, key));
    return values_[i];
  }
  std::int32_t int32(std::string_view key) const { return number<std::int32_t>(key, text(key)); }
  float real(std::string_view key) const { return number<float>(key, text(key)); }
  bool flag(std::string_view key) const {
    const auto& v = text(key);
    if (v != "0" && v != "1")
      throw InvalidArgumentError(fmt::format("method '{}': {}={} must be 0 or 1", source_, key, v));
    return v == "1";
  }
  std::vector<double> reals(std::string_view key) const {  // "0.6,0.2,0.1"
    std::vector<double> out;
    const std::string_view value = text(key);
    if (value.empty()) return out;
    std::size_t p = 0;
    while (p <= value.size()) {
      const auto q = std::min(value.find(',', p), value.size());
      out.push_back(number<double>(key, value.substr(p, q - p)));
      p = q + 1;
    }
    return out;
  }

  // Canonical spec: the name, the always-shown keys and every key set away
  // from its default, in the parameters' order. It round-trips through parse.
  std::string spec() const {
    std::string s = name;
    for (std::size_t i = 0; i < params_.size(); ++i) {
      const auto& param = params_[i];
      if (!given_[i] && (!param.always_in_spec || values_[i].empty())) continue;
      if (param.type == ParamType::kReals) {  // a vector (sequoia's p), at 3 significant digits
        std::string v;
        for (const auto x : reals(param.key)) v += fmt::format("{}{:.3g}", v.empty() ? "" : ",", x);
        s += ":" + param.key + "=" + v;
        continue;
      }
      s += ":" + param.key + "=" + values_[i];
    }
    return s;
  }

 private:
  std::size_t index_of(std::string_view key) const {
    return static_cast<std::size_t>(
        std::find_if(params_.begin(), params_.end(), [&](const MethodParam& p) { return p.key == key; }) -
        params_.begin());
  }
  template <class T>
  T number(std::string_view key, std::string_view text) const {
    T value{};
    const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (text.empty() || ec != std::errc{} || ptr != text.data() + text.size())
      throw InvalidArgumentError(fmt::format("method '{}': {}={} is not a number", source_, key, text));
    return value;
  }

  std::vector<MethodParam> params_;
  std::vector<std::string> values_;  // parameters' order
  std::vector<bool> given_;          // set in the spec, not defaulted
  std::string source_;               // the spec as given, for messages
};

}  // namespace specdec
