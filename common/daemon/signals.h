// Shutdown signals for the daemons. SIGTERM and SIGINT are blocked in every thread (call
// BlockShutdownSignals first in main, before any thread starts, so that threads inherit the
// mask) and then received synchronously by one waiting thread with sigtimedwait. No work
// happens in an async signal handler, so draining can take locks and join threads.
#ifndef SCD_COMMON_DAEMON_SIGNALS_H_
#define SCD_COMMON_DAEMON_SIGNALS_H_

#include <chrono>

namespace scd::daemon {

// Blocks SIGTERM, SIGINT and SIGPIPE in the calling thread (and threads it starts later).
// SIGPIPE stays blocked for good: a peer that disconnects surfaces as EPIPE instead.
void BlockShutdownSignals();

// Waits up to `timeout` for SIGTERM or SIGINT; returns the signal number, or 0 on timeout.
int WaitForShutdownSignal(std::chrono::milliseconds timeout);

}  // namespace scd::daemon

#endif  // SCD_COMMON_DAEMON_SIGNALS_H_
