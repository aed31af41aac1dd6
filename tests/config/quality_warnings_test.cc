// QualityWarnings: a decode config that runs below its measured quality is named, with the key
// and the measured consequence (the daemon logs each at start-up; tests/daemons checks the
// log line).
#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "decode_server/decode_config.h"

namespace scd {
namespace {

TEST_CASE("SEKV without a calibrated router is a quality warning", "[cpu]") {
  DecodeDaemonConfig c;
  CHECK(QualityWarnings(c).empty());  // SEKV off

  c.engine.sekv.enabled = true;
  const std::vector<ConfigWarning> warnings = QualityWarnings(c);
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0].key == "sekv.router");
  CHECK(warnings[0].consequence.find("times the calibrated router") != std::string::npos);
  CHECK(warnings[0].consequence.find("H2O") != std::string::npos);

  c.sekv_router = "configs/calibration/stories260K-babi-qa.sekv.safetensors";
  CHECK(QualityWarnings(c).empty());
}

}  // namespace
}  // namespace scd
