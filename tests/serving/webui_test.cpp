// The chat page's routes (src/serving/webui.h): what is served, with which headers, and
// that nothing but the page's own files is.
#include "serving/webui.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>

namespace ernie {
namespace {

using ::testing::HasSubstr;

std::map<std::string, std::string> headers_of(const HttpResponse& response) {
  std::map<std::string, std::string> headers;
  for (const auto& [name, value] : response.headers) headers[name] = value;
  return headers;
}

TEST(WebuiTest, ServesThePageAndItsFilesWithAPolicy) {
  const std::optional<HttpResponse> index = webui_response("/");
  ASSERT_TRUE(index.has_value());
  EXPECT_EQ(index->content_type, "text/html; charset=utf-8");
  EXPECT_THAT(index->body, HasSubstr("<script type=\"module\" src=\"/webui/app.js\"></script>"));
  EXPECT_EQ(webui_response("/index.html")->body, index->body);
  const auto headers = headers_of(*index);
  EXPECT_THAT(headers.at("Content-Security-Policy"), HasSubstr("script-src 'self'"));
  EXPECT_THAT(headers.at("Content-Security-Policy"), HasSubstr("connect-src 'self'"));
  EXPECT_EQ(headers.at("X-Content-Type-Options"), "nosniff");
  // Every file the page loads is there, with its type.
  for (const auto& [path, type] : std::map<std::string, std::string>{{"/webui/app.js", "text/javascript; charset=utf-8"},
                                                                     {"/webui/markdown.js", "text/javascript; charset=utf-8"},
                                                                     {"/webui/style.css", "text/css; charset=utf-8"}}) {
    const std::optional<HttpResponse> file = webui_response(path);
    ASSERT_TRUE(file.has_value()) << path;
    EXPECT_EQ(file->content_type, type) << path;
    EXPECT_FALSE(file->body.empty()) << path;
  }
}

TEST(WebuiTest, AnswersNothingElse) {
  for (const char* path : {"/webui/", "/webui/nope.js", "/webui/../CMakeLists.txt", "/webui/app.js/", "/v1/models", "/app.js",
                           "/webui//app.js", "/WEBUI/app.js", "/index.htm"})
    EXPECT_FALSE(webui_response(path).has_value()) << path;
}

}  // namespace
}  // namespace ernie
