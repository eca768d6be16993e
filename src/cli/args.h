// Command-line flags of one subcommand: `--name value`, `--name=value`, boolean
// `--flag`; underscores and dashes are interchangeable (FastDeploy accepts both
// spellings). An unknown flag is refused, naming the closest known one.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace ernie {

struct OptionSpec {
  std::string name;        // without leading dashes, dash-separated: "max-tokens"
  std::string value_name;  // e.g. "N"; empty for a boolean flag
  std::string help;
  std::string default_value;  // shown in --help and returned when the flag is absent
  bool repeatable = false;    // may be given several times (get_all returns every value)
};

class ParsedArgs {
 public:
  bool help_requested() const { return help_requested_; }
  bool has(const std::string& name) const { return values_.count(name) != 0; }
  bool flag(const std::string& name) const { return has(name); }
  // The given value, else the spec's default; throws if neither exists.
  std::string get(const std::string& name) const;
  std::optional<std::string> get_optional(const std::string& name) const;
  int64_t get_int(const std::string& name) const;
  // Every value of a repeatable flag, in order (empty when absent).
  std::vector<std::string> get_all(const std::string& name) const;
  double get_double(const std::string& name) const;

 private:
  friend class ArgParser;
  bool help_requested_ = false;
  std::map<std::string, std::vector<std::string>> values_;
  std::map<std::string, std::string> defaults_;
};

class ArgParser {
 public:
  ArgParser(std::string usage, std::string summary, std::vector<OptionSpec> options);

  // Parses argv[first..argc). Throws ernie::Error for an unknown flag, a missing value
  // or a repeated flag.
  ParsedArgs parse(int argc, char** argv, int first) const;
  std::string help_text() const;

 private:
  const OptionSpec* find(const std::string& name) const;

  std::string usage_;
  std::string summary_;
  std::vector<OptionSpec> options_;
};

// Levenshtein distance, for "did you mean" suggestions.
size_t edit_distance(const std::string& a, const std::string& b);

}  // namespace ernie
