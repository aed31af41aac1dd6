// CheckJsonContentType (openai_api.h): the OpenAI routes take application/json in any case and
// with parameters; any other type, or none, is a 415 with the OpenAI error body's code
// "unsupported_media_type" and a message naming what came.
#include <catch2/catch.hpp>
#include <string>

#include "common/http/openai_api.h"
#include "common/http/openai_error.h"
#include "nlohmann/json.hpp"

namespace scd::http {
namespace {

TEST_CASE("JSON bodies: application/json with any parameters and case passes", "[cpu]") {
  for (const char* type :
       {"application/json", "application/json; charset=utf-8", "Application/JSON",
        "application/json;charset=UTF-8", "  application/json  ; charset=utf-8"}) {
    INFO(type);
    CHECK(CheckJsonContentType(type).ok());
  }
}

TEST_CASE("JSON bodies: another Content-Type, or none, is 415 unsupported_media_type", "[cpu]") {
  for (const char* type :
       {"", "text/plain", "application/x-www-form-urlencoded", "application/jsonl",
        "application/json-patch+json", "multipart/form-data; boundary=x", "json"}) {
    INFO("'" << type << "'");
    const absl::Status st = CheckJsonContentType(type);
    REQUIRE(absl::IsInvalidArgument(st));
    const HttpError e = ToHttpError(st);
    CHECK(e.status == 415);
    const nlohmann::json body = nlohmann::json::parse(e.body);
    CHECK(body["error"]["code"] == "unsupported_media_type");
    CHECK(body["error"]["type"] == "invalid_request_error");
    const std::string message = body["error"]["message"];
    CHECK_THAT(message, Catch::Contains("application/json"));
    if (*type != '\0') CHECK_THAT(message, Catch::Contains(std::string("'") + type + "'"));
  }
  CHECK_THAT(std::string(CheckJsonContentType("").message()),
             Catch::StartsWith("The request has no Content-Type"));
  // A long header is echoed cut short.
  const std::string long_type = "text/" + std::string(500, 'x');
  CHECK(CheckJsonContentType(long_type).message().size() < 250);
}

}  // namespace
}  // namespace scd::http
