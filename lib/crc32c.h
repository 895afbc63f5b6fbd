/*
 * CRC32C (Castagnoli: polynomial 0x1EDC6F41, reflected 0x82F63B78), the checksum of iSCSI,
 * SCTP and ext4 metadata, for checking payloads end to end (lib/crc32c.c).
 *
 * Convention (zlib's crc32()): the pre- and post-inversion happen inside, so a checksum starts
 * at RCCI_CRC32C_INIT (0), and the value after each piece is the CRC32C of all bytes so far:
 *
 *     uint32_t crc = RCCI_CRC32C_INIT;
 *     crc = rcci_crc32c_update(crc, part1, len1);
 *     crc = rcci_crc32c_update(crc, part2, len2);   // == CRC32C of part1 || part2
 *
 * so a frame whose payload arrives in several reads gets the same value as one call over the
 * whole. CRC32C("123456789") = 0xE3069283; of no bytes, 0.
 *
 * rcci_crc32c_update uses the SSE4.2 crc32 instruction where the CPU has it (detected at run
 * time; three interleaved streams, several bytes per cycle), else a portable slice-by-8 table
 * path. Both give identical values. Every function here is thread-safe and never fails; buf
 * may be NULL when len is 0.
 */
#ifndef RINGCC_CRC32C_H
#define RINGCC_CRC32C_H

#include <stddef.h>
#include <stdint.h>

#define RCCI_CRC32C_INIT 0u

/* The CRC32C of the bytes that gave `crc`, followed by buf[0..len). */
uint32_t rcci_crc32c_update(uint32_t crc, const void *buf, size_t len);

/* The implementations behind it, for tests and benchmarks. Same contract. */
typedef uint32_t (*rcci_crc32c_fn)(uint32_t crc, const void *buf, size_t len);
/* Slice-by-8 tables: any CPU, any byte order, any alignment. */
uint32_t rcci_crc32c_update_portable(uint32_t crc, const void *buf, size_t len);
/* The SSE4.2 path, or NULL where this CPU or this build has none. */
rcci_crc32c_fn rcci_crc32c_hw(void);

/* The name of the path rcci_crc32c_update takes: "sse4.2" or "slice-by-8". */
const char *rcci_crc32c_impl(void);

#endif /* RINGCC_CRC32C_H */
