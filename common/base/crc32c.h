// CRC-32C (Castagnoli, polynomial 0x1EDC6F41, reflected 0x82F63B78), the checksum of every
// framed payload (SCD wire format, transport frames). Software slice-by-8; the value for
// "123456789" is 0xE3069283 (RFC 3720, appendix B.4).
#ifndef SCD_COMMON_BASE_CRC32C_H_
#define SCD_COMMON_BASE_CRC32C_H_

#include <cstddef>
#include <cstdint>

namespace scd {

// Extends `crc` (0 for a fresh checksum) with `size` bytes.
uint32_t Crc32c(const void* data, size_t size, uint32_t crc = 0);

}  // namespace scd

#endif  // SCD_COMMON_BASE_CRC32C_H_
