// Differential test of the Jinja engine against jinja2 itself: every template of
// tests/text/jinja_corpus (feature templates, chat templates in the shapes of public
// model templates, and the two ERNIE templates of the golden checkpoints) is rendered
// with every conversation of the corpus by both engines, and the bytes must match;
// where jinja2 raises, ours must raise too. The reference is jinja_render.py run by
// Debian's python3 with python3-jinja2, in transformers' chat-template environment.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "support/test_support.h"
#include "text/jinja/template.h"
#include "text/tokenizer_trainer.h"
#include "util/error.h"

#ifndef ERNIE_PYTHON3
#define ERNIE_PYTHON3 "/usr/bin/python3"
#endif

namespace ernie::jinja {
namespace {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

const fs::path kCorpus = fs::path(ERNIE_SOURCE_DIR) / "tests/text/jinja_corpus";
const fs::path kScript = fs::path(ERNIE_SOURCE_DIR) / "tests/text/jinja_render.py";

using testing::read_file;

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// Runs a shell command and returns its stdout; `status` gets the exit status.
std::string run_command(const std::string& command, int& status) {
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) throw std::runtime_error("cannot run " + command);
  std::string out;
  char buf[65536];
  size_t n = 0;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) out.append(buf, n);
  const int raw = pclose(pipe);
  status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  return out;
}

bool reference_available() {
  static const bool available = [] {
    int status = 0;
    run_command(std::string(ERNIE_PYTHON3) + " -c 'import jinja2' 2>/dev/null", status);
    return status == 0;
  }();
  return available;
}

struct Result {
  bool ok = false;
  std::string text;  // the output, or the error message
};

// jinja_render.py in one of its JSON modes; one Result per render.
std::vector<Result> reference(const std::vector<std::string>& args) {
  std::string command = std::string(ERNIE_PYTHON3) + " " + shell_quote(kScript.string());
  for (const auto& a : args) command += " " + shell_quote(a);
  int status = 0;
  const std::string out = run_command(command + " 2>&1", status);
  if (status != 0) throw std::runtime_error("jinja_render.py failed (" + std::to_string(status) + "): " + out);
  std::vector<Result> results;
  for (const auto& r : ordered_json::parse(out)) {
    const bool ok = r.at("ok").get<bool>();
    results.push_back({ok, r.at(ok ? "output" : "error").get<std::string>()});
  }
  return results;
}

Result ours(const std::string& source, const ordered_json& context) {
  try {
    return {true, Template::parse(source).render(context)};
  } catch (const Error& e) {
    return {false, e.what()};
  }
}

// Where two renders first differ, for a readable failure.
std::string first_difference(const std::string& expected, const std::string& actual) {
  size_t i = 0;
  while (i < expected.size() && i < actual.size() && expected[i] == actual[i]) ++i;
  const size_t from = i > 40 ? i - 40 : 0;
  std::ostringstream out;
  out << "first difference at byte " << i << "\n  jinja2: ..." << ordered_json(expected.substr(from, 120)).dump(-1, ' ', false, ordered_json::error_handler_t::replace)
      << "\n  ours:   ..." << ordered_json(actual.substr(from, 120)).dump(-1, ' ', false, ordered_json::error_handler_t::replace);
  return out.str();
}

void expect_same(const Result& expected, const Result& actual, const std::string& what) {
  if (!expected.ok) {
    EXPECT_FALSE(actual.ok) << what << ": jinja2 raised (" << expected.text << ") but ours rendered:\n" << actual.text;
    return;
  }
  ASSERT_TRUE(actual.ok) << what << ": jinja2 rendered but ours raised: " << actual.text;
  EXPECT_TRUE(expected.text == actual.text) << what << ": " << first_difference(expected.text, actual.text);
}

std::vector<fs::path> files_in(const fs::path& dir, const std::string& extension) {
  std::vector<fs::path> out;
  if (!fs::is_directory(dir)) return out;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() == extension) out.push_back(entry.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// A scratch directory for templates that live inside JSON files.
class ScratchDir {
 public:
  ScratchDir() {
    std::string pattern = (fs::temp_directory_path() / "jinja_differential_XXXXXX").string();
    if (!mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~ScratchDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// The corpus templates, the ERNIE templates of the golden checkpoints, and the ones
// `ernie synth` writes.
struct TemplateCase {
  std::string name;
  fs::path path;              // a .jinja file, or
  std::string golden_model;   // a golden model whose tokenizer_config.json holds it, or
  std::string text;           // the template itself
};

std::vector<TemplateCase> template_cases() {
  std::vector<TemplateCase> cases;
  for (const auto& path : files_in(kCorpus / "templates", ".jinja")) {
    std::string name = path.stem().string();
    for (char& c : name) {
      if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
    }
    cases.push_back({"corpus_" + name, path, "", ""});
  }
  cases.push_back({"ernie_tiny_dense", {}, "tiny-dense", ""});
  cases.push_back({"ernie_tiny_thinking", {}, "tiny-thinking", ""});
  cases.push_back({"synth_text", {}, "", std::string(ernie_text_chat_template())});
  cases.push_back({"synth_thinking", {}, "", std::string(ernie_thinking_chat_template())});
  cases.push_back({"synth_vl", {}, "", std::string(ernie_vl_chat_template())});
  return cases;
}

class JinjaDifferential : public ::testing::TestWithParam<TemplateCase> {
 protected:
  void SetUp() override {
    if (!reference_available()) FAIL() << ERNIE_PYTHON3 << " cannot import jinja2 (scripts/install-deps.sh installs python3-jinja2); no reference to compare with";
  }
};

TEST_P(JinjaDifferential, EveryConversationRendersLikeJinja2) {
  const TemplateCase& c = GetParam();
  ScratchDir scratch;
  fs::path template_path = c.path;
  if (!c.golden_model.empty()) {
    const auto config = ordered_json::parse(read_file(fs::path(testing::golden_model_dir(c.golden_model)) / "tokenizer_config.json"));
    template_path = scratch.path() / "template.jinja";
    std::ofstream(template_path, std::ios::binary) << config.at("chat_template").get<std::string>();
  } else if (!c.text.empty()) {
    template_path = scratch.path() / "template.jinja";
    std::ofstream(template_path, std::ios::binary) << c.text;
  }
  const std::string source = read_file(template_path);
  const auto conversations = files_in(kCorpus / "conversations", ".json");
  ASSERT_GE(conversations.size(), 10u);
  std::vector<std::string> args = {"--json", template_path.string()};
  for (const auto& conversation : conversations) args.push_back(conversation.string());
  const std::vector<Result> expected = reference(args);
  ASSERT_EQ(expected.size(), conversations.size());
  for (size_t i = 0; i < conversations.size(); ++i) {
    const auto context = ordered_json::parse(read_file(conversations[i]));
    expect_same(expected[i], ours(source, context), c.name + " with " + conversations[i].filename().string());
  }
}

INSTANTIATE_TEST_SUITE_P(Corpus, JinjaDifferential, ::testing::ValuesIn(template_cases()),
                         [](const ::testing::TestParamInfo<TemplateCase>& param) { return param.param.name; });

TEST(JinjaDifferentialErrors, BrokenTemplatesFailInBoth) {
  if (!reference_available()) FAIL() << "no jinja2 reference: run scripts/install-deps.sh";
  const fs::path context_path = kCorpus / "conversations/basic.json";
  const auto context = ordered_json::parse(read_file(context_path));
  const auto templates = files_in(kCorpus / "errors", ".jinja");
  ASSERT_GE(templates.size(), 20u);
  for (const auto& path : templates) {
    const std::vector<Result> expected = reference({"--json", path.string(), context_path.string()});
    ASSERT_EQ(expected.size(), 1u);
    EXPECT_FALSE(expected[0].ok) << path.filename() << " is meant to fail, but jinja2 rendered it";
    const Result actual = ours(read_file(path), context);
    EXPECT_FALSE(actual.ok) << path.filename() << ": jinja2 raised (" << expected[0].text << ") but ours rendered "
                            << actual.text;
    if (!actual.ok) {
      EXPECT_NE(actual.text.find("line "), std::string::npos) << "no position in: " << actual.text;
    }
  }
}

TEST(JinjaDifferentialSnippets, EverySnippetRendersLikeJinja2) {
  if (!reference_available()) FAIL() << "no jinja2 reference: run scripts/install-deps.sh";
  const fs::path snippets_path = kCorpus / "snippets.json";
  const fs::path context_path = kCorpus / "snippets_context.json";
  const auto snippets = ordered_json::parse(read_file(snippets_path));
  const auto context = ordered_json::parse(read_file(context_path));
  const std::vector<Result> expected = reference({"--snippets", snippets_path.string(), context_path.string()});
  ASSERT_EQ(expected.size(), snippets.size());
  ASSERT_GE(snippets.size(), 200u);
  for (size_t i = 0; i < snippets.size(); ++i) {
    const std::string source = snippets[i].get<std::string>();
    expect_same(expected[i], ours(source, context), "snippet " + std::to_string(i) + " " + source);
  }
}

}  // namespace
}  // namespace ernie::jinja
