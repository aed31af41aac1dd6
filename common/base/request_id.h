// Request ids: one format for every front door. The HTTP server (common/http/http_server.h)
// answers every request with one as X-Request-Id; the gRPC Generation service
// (prefill_server/generation_service.h) sends one as the x-request-id initial metadata and in
// the final event. Both draw them from NewRequestId, so a log search, a trace or a client sees
// one format whichever door a request came through.
//
// An id is 32 lowercase hexadecimal characters: 128 bits from a per-thread Mersenne Twister
// seeded from std::random_device and the thread id, so ids of concurrent requests on different
// threads do not collide. Ids name requests in logs; they are not secrets.
#ifndef SCD_COMMON_BASE_REQUEST_ID_H_
#define SCD_COMMON_BASE_REQUEST_ID_H_

#include <cstddef>
#include <string>

namespace scd {

inline constexpr size_t kRequestIdLength = 32;

// A new id: kRequestIdLength characters of [0-9a-f]. Thread-safe.
std::string NewRequestId();

}  // namespace scd

#endif  // SCD_COMMON_BASE_REQUEST_ID_H_
