#include "cli/args.h"

#include <algorithm>
#include <charconv>
#include <sstream>

#include "util/error.h"

namespace ernie {
namespace {

std::string normalize(std::string name) {
  std::replace(name.begin(), name.end(), '_', '-');
  return name;
}

}  // namespace

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> previous(b.size() + 1), current(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) previous[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    current[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      current[j] = std::min({previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(previous, current);
  }
  return previous[b.size()];
}

std::string ParsedArgs::get(const std::string& name) const {
  if (auto value = get_optional(name)) return *value;
  fail("missing required flag --", name);
}

std::optional<std::string> ParsedArgs::get_optional(const std::string& name) const {
  if (auto found = values_.find(name); found != values_.end()) return found->second.back();
  if (auto found = defaults_.find(name); found != defaults_.end() && !found->second.empty()) return found->second;
  return std::nullopt;
}

std::vector<std::string> ParsedArgs::get_all(const std::string& name) const {
  const auto found = values_.find(name);
  return found == values_.end() ? std::vector<std::string>{} : found->second;
}

int64_t ParsedArgs::get_int(const std::string& name) const {
  const std::string text = get(name);
  int64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size())
    fail("--", name, " expects an integer, got \"", text, "\"");
  return value;
}

double ParsedArgs::get_double(const std::string& name) const {
  const std::string text = get(name);
  try {
    size_t used = 0;
    const double value = std::stod(text, &used);
    if (used == text.size()) return value;
  } catch (const std::exception&) {
  }
  fail("--", name, " expects a number, got \"", text, "\"");
}

ArgParser::ArgParser(std::string usage, std::string summary, std::vector<OptionSpec> options)
    : usage_(std::move(usage)), summary_(std::move(summary)), options_(std::move(options)) {}

const OptionSpec* ArgParser::find(const std::string& name) const {
  for (const OptionSpec& option : options_)
    if (option.name == name) return &option;
  return nullptr;
}

ParsedArgs ArgParser::parse(int argc, char** argv, int first) const {
  ParsedArgs parsed;
  for (const OptionSpec& option : options_) parsed.defaults_[option.name] = option.default_value;
  for (int i = first; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      parsed.help_requested_ = true;
      continue;
    }
    if (arg.rfind("--", 0) != 0) fail("unexpected argument \"", arg, "\" (flags start with --; see --help)");
    std::string name = normalize(arg.substr(2));
    std::optional<std::string> value;
    if (const size_t equals = name.find('='); equals != std::string::npos) {
      value = arg.substr(2 + equals + 1);
      name = name.substr(0, equals);
    }
    const OptionSpec* option = find(name);
    if (option == nullptr) {
      const OptionSpec* closest = nullptr;
      size_t best = SIZE_MAX;
      for (const OptionSpec& candidate : options_) {
        const size_t distance = edit_distance(name, candidate.name);
        if (distance < best) {
          best = distance;
          closest = &candidate;
        }
      }
      if (closest != nullptr && best <= std::max<size_t>(2, name.size() / 3))
        fail("unknown flag --", name, "; did you mean --", closest->name, "?");
      fail("unknown flag --", name, " (see --help)");
    }
    if (parsed.values_.count(name) != 0 && !option->repeatable) fail("flag --", name, " is given twice");
    if (option->value_name.empty()) {
      if (value) fail("flag --", name, " takes no value, got \"", *value, "\"");
      parsed.values_[name].push_back("true");
      continue;
    }
    if (!value) {
      if (i + 1 >= argc) fail("flag --", name, " needs a value (", option->value_name, ")");
      value = argv[++i];
    }
    parsed.values_[name].push_back(*value);
  }
  return parsed;
}

std::string ArgParser::help_text() const {
  std::ostringstream text;
  text << "usage: " << usage_ << "\n\n" << summary_ << "\n\noptions:\n";
  for (const OptionSpec& option : options_) {
    std::string left = "  --" + option.name + (option.value_name.empty() ? "" : " " + option.value_name);
    text << left;
    if (left.size() < 28) text << std::string(28 - left.size(), ' ');
    else text << "\n" << std::string(28, ' ');
    text << option.help;
    if (!option.default_value.empty() && !option.value_name.empty()) text << " (default: " << option.default_value << ")";
    text << "\n";
  }
  text << "  --help                    show this help\n";
  return text.str();
}

}  // namespace ernie
