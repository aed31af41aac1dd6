// Status propagation macros for absl::Status / absl::StatusOr, the project's one error scheme
// (see docs/STYLE.md, "Errors"). They keep early returns to one line without hiding control flow.
#ifndef SCD_COMMON_BASE_STATUS_MACROS_H_
#define SCD_COMMON_BASE_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define SCD_CONCAT_INNER_(a, b) a##b
#define SCD_CONCAT_(a, b) SCD_CONCAT_INNER_(a, b)

// Returns from the enclosing function when `expr` yields a non-OK absl::Status.
#define SCD_RETURN_IF_ERROR(expr)              \
  do {                                         \
    const ::absl::Status scd_status_ = (expr); \
    if (!scd_status_.ok()) return scd_status_; \
  } while (0)

// `SCD_ASSIGN_OR_RETURN(auto x, F());` assigns the value of an absl::StatusOr or returns its
// error from the enclosing function.
#define SCD_ASSIGN_OR_RETURN(lhs, expr) \
  SCD_ASSIGN_OR_RETURN_IMPL_(SCD_CONCAT_(scd_statusor_, __LINE__), lhs, expr)
#define SCD_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return tmp.status();              \
  lhs = std::move(tmp).value()

#endif  // SCD_COMMON_BASE_STATUS_MACROS_H_
