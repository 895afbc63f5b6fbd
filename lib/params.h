/*
 * Every tunable RCC_* environment variable, declared once in one table
 * (name, kind, default, description) and read once per process.
 */
#ifndef RINGCC_PARAMS_H
#define RINGCC_PARAMS_H

#include <stddef.h>
#include <stdint.h>

#include "ringcc.h"

/* X(id, kind, default, min, max, description). kind: INT (accepts K/M/G
 * suffixes, powers of 1024) or STR. min/max bound INT values. */
#define RCCI_PARAM_LIST(X)                                                                         \
    X(DEBUG, STR, "WARN", 0, 0, "log level: NONE, WARN, INFO or TRACE")                            \
    X(DEBUG_SUBSYS, STR, "all", 0, 0,                                                              \
      "subsystems whose INFO and TRACE lines show: all, or a comma-separated list of init, "       \
      "bootstrap, net, coll, p2p, cuda, env, timeline; ^list: all but those (warnings always "     \
      "show)")                                                                                     \
    X(DEBUG_FILE, STR, "", 0, 0, "log to this file instead of stderr; %h = host, %p = pid")        \
    X(TIMELINE, STR, "", 0, 0,                                                                     \
      "write a Chrome-trace/Perfetto JSON timeline of every operation and step per rank to this "  \
      "path (%r = rank, %h = host, %p = pid); tools/ringcc-timeline merges the ranks' files")      \
    X(TIMEOUT, INT, "300", 1, 86400,                                                               \
      "seconds any wait may go without progress before it fails with RCC_ERR_TIMEOUT")             \
    X(STALL_WARN, INT, "60", 0, 86400,                                                             \
      "seconds an operation may wait before a warning names the peers it waits for (repeated "     \
      "at that interval); 0: never")                                                               \
    X(CHUNK_BYTES, INT, "256K", 4096, 1073741824,                                                  \
      "pipeline chunk size: the unit that flows around the ring (rounded down to a multiple of "   \
      "64 bytes); must be the same on every rank")                                                 \
    X(SLOTS, INT, "4", 1, 64, "chunks in flight per direction (receive slots, pending sends)")     \
    X(RING_PASS_BYTES, INT, "2M", 0, 1ll << 40,                                                    \
      "allreduce on the ring over host memory: a buffer of twice this or more runs in passes of "  \
      "this many bytes to twice that, one after another, each a whole reduce-scatter and "         \
      "allgather in chunks of an eighth of a rank's part (64K to RCC_CHUNK_BYTES; a pass grows "   \
      "to hold 8 per rank), so what a pass reduced is still in cache when its allgather "          \
      "overwrites it; 0: one pass; must be the same on every rank")                                \
    X(DEVICE_CHUNK_BYTES, INT, "8M", 4096, 1073741824,                                             \
      "largest chunk of collectives on device buffers (at least 2 per segment where every ring "   \
      "edge moves GPU to GPU, else 8); chunks that fit a cudaipc slot are reduced where they "     \
      "land (queued on the device ring, each must: at most RCC_CUDAIPC_SLOT_BYTES, or "            \
      "RCC_IB_GDR_SLOT_BYTES over ibverbs); must be the same on every rank")                       \
    X(DEVICE_PIPELINE, INT, "3", 0, 4,                                                             \
      "stream collectives on device buffers: 0 stages every one whole on the caller's stream; 1 "  \
      "runs ring and chain collectives chunk by chunk through pinned slots, all GPU work queued "  \
      "at the call; 2 as 1, but GPU to GPU over the device ring (cudaipc on one host, ibverbs "    \
      "with GPUDirect RDMA across hosts) where there is one; 3 (auto): 2; 4 as 2, but the device " \
      "ring's GPU work queued by the progress thread as chunks arrive (the earlier design, for "   \
      "comparison: it can deadlock where streams share hardware queues; cudaipc only); must be "   \
      "the same on every rank")                                                                    \
    X(CUDAIPC_INPLACE, INT, "1", 0, 1,                                                             \
      "cudaipc transport: 1 lets the engine reduce chunks in the receive slot they landed in and " \
      "write results into the next rank's slot; 0 copies every message in and out (for "           \
      "comparison, with RCC_DEVICE_PIPELINE=4; queued device rings are always in place)")          \
    X(CUDAIPC_SLOT_BYTES, INT, "8M", 65536, 268435456,                                             \
      "cudaipc transport: bytes per receive slot (8 per connection, device memory); a message "    \
      "larger fills several and is copied out of them")                                            \
    X(CUDAIPC_WINDOW_BYTES, INT, "16M", 0, 1ll << 40,                                              \
      "device ring over cudaipc: allreduces and allgathers of at least this many bytes write "     \
      "chunks straight into the next rank's output, which it maps by IPC for the operation; "      \
      "smaller ones go through the receive slots; must be the same on every rank")                 \
    X(NSOCKS, INT, "1", 1, 8,                                                                      \
      "connections (TCP sockets) per ring edge; the chunks of operations of RCC_NSOCKS_MIN_BYTES " \
      "or more are dealt round-robin over them; must be the same on every rank")                   \
    X(NSOCKS_MIN_BYTES, INT, "16M", 0, 1ll << 40,                                                  \
      "smallest operation (its whole buffer, bytes) whose chunks use all RCC_NSOCKS connections; " \
      "smaller ones use the first; must be the same on every rank")                                \
    X(SOCKET_IFNAME, STR, "", 0, 0,                                                                \
      "network interface to use (prefix match); default: the one that routes to the root")         \
    X(SOCKET_BUF_BYTES, INT, "4M", 0, 1073741824,                                                  \
      "SO_SNDBUF/SO_RCVBUF for data sockets; 0 leaves the kernel's autotuning")                    \
    X(CHECKSUM, INT, "0", 0, 1,                                                                    \
      "1: every TCP message carries a CRC32C of its payload, checked by the receiver; must be "    \
      "the same on every rank")                                                                    \
    X(CHECKSUM_FAULT, INT, "0", 0, 1ll << 40,                                                      \
      "testing: N sends every Nth checksum wrong, as damage on the way would (0: never)")          \
    X(SOCKET_CONGESTION, STR, "cubic", 0, 0,                                                       \
      "TCP congestion control of data sockets (TCP_CONGESTION); empty: the system's default")      \
    X(TRANSPORT, STR, "", 0, 0,                                                                    \
      "force a transport by name (cudaipc, ibverbs, tcp); default: best per peer")                 \
    X(IB_HCA, STR, "", 0, 0,                                                                       \
      "RDMA device for the verbs transport: NAME or NAME:PORT (prefix match, as NCCL_IB_HCA); "    \
      "default: the first device with an active port")                                             \
    X(IB_SLOTS, INT, "8", 1, 64, "verbs transport: receive slots per connection and direction")    \
    X(IB_SLOT_BYTES, INT, "512K", 4096, 16777216,                                                  \
      "verbs transport: bytes per receive slot (a message larger fills several)")                  \
    X(IB_GDR_SLOT_BYTES, INT, "8M", 4096, 1073741824,                                              \
      "verbs transport, device ring to other hosts (GPUDirect RDMA): bytes per slot of device "    \
      "memory, RCC_IB_SLOTS of them per connection each way; a chunk (RCC_DEVICE_CHUNK_BYTES) "    \
      "must fit one; must be the same on every rank")                                              \
    X(ALGO, STR, "auto", 0, 0,                                                                     \
      "allreduce algorithm: auto (rd up to RCC_SMALL_MAX_BYTES, rabenseifner up to "               \
      "RCC_MID_MAX_BYTES on 2^k ranks, else ring), ring, rabenseifner, twostep, rd, direct or "    \
      "star; must be the same on every rank")                                                      \
    X(RD_LEADERS, INT, "0", 0, 1 << 20,                                                            \
      "ranks that run recursive doubling's exchanges (a power of two; the others hand their "      \
      "input to one of them and get the result back); 0: auto, the most unless a host would run "  \
      "more of them than it has CPUs; must be the same on every rank")                             \
    X(RD_MOVE_LEADERS, INT, "1", 0, 1,                                                             \
      "1: where recursive doubling runs among fewer leaders than ranks, a leader that shares a "   \
      "CPU with another leader of its host hands the lead to a rank of its group on another CPU "  \
      "(the operations carry the ranks' CPUs; the results do not depend on who leads); 0: the "    \
      "leaders stay put; must be the same on every rank")                                          \
    X(SMALL_MAX_BYTES, INT, "8K", 0, 1ll << 30,                                                    \
      "largest allreduce (bytes per rank) that auto runs by recursive doubling; must be the same " \
      "on every rank")                                                                             \
    X(MID_MAX_BYTES, INT, "2M", 0, 1ll << 40,                                                      \
      "largest allreduce (bytes per rank) that auto runs by Rabenseifner's algorithm (rank "       \
      "counts that are powers of two; the others take the ring); must be the same on every rank")  \
    X(FUSION_BYTES, INT, "64M", 0, 1ll << 40,                                                      \
      "largest fused buffer for allreduces issued in one group; 0 disables fusion; must be the "   \
      "same on every rank")                                                                        \
    X(INLINE, INT, "1", 0, 1,                                                                      \
      "1: a blocking call on an idle communicator runs on the caller's thread, not the progress "  \
      "thread (no hand-offs); 0: always the progress thread")                                      \
    X(SPIN_US, INT, "50", 0, 1000000,                                                              \
      "microseconds a waiting thread polls its connections (yielding) before it sleeps; a "        \
      "blocking call's own thread polls up to 4 times as long while its recent waits were that "   \
      "long")                                                                                      \
    X(SLOW_POLL_US, INT, "1000", 0, 1000000,                                                       \
      "microseconds a blocking allreduce's own thread polls in each wait before it sleeps, where " \
      "it is larger than RCC_SMALL_MAX_BYTES and recent allreduces of its size (the same power "   \
      "of two) ran below RCC_SLOW_BUSBW: a slow link, not the CPU, sets their pace (measured on "  \
      "every 8th such operation, which sleeps as usual); 0: never")                                \
    X(SLOW_BUSBW, INT, "150", 0, 1000000,                                                          \
      "bus bandwidth in MB/s (10^6 bytes per second) below which RCC_SLOW_POLL_US applies")

typedef enum {
#define PARAM_ID_(id, kind, def, min, max, desc) RCCI_PARAM_##id,
    RCCI_PARAM_LIST(PARAM_ID_)
#undef PARAM_ID_
        RCCI_PARAM_COUNT
} rcci_param_id_t;

typedef struct {
    const char *name; /* "RCC_TIMEOUT" */
    int is_int;
    const char *default_text;
    int64_t min, max;
    const char *description;
} rcci_param_info_t;

/* Reads the environment once (later calls return the first outcome). A
 * malformed or out-of-range value is RCC_ERR_INVALID_ARGUMENT with a message
 * naming the variable, its value and what is accepted. Thread-safe. */
rcc_result_t rcci_params_load(void);

/* Values after rcci_params_load succeeded (defaults before). */
int64_t rcci_param_int(rcci_param_id_t id);
const char *rcci_param_str(rcci_param_id_t id); /* never NULL; "" when unset */
const rcci_param_info_t *rcci_param_info(rcci_param_id_t id);

/* Parses `text` as the value of parameter `id`, the way rcci_params_load
 * reads the environment: an INT parameter's value (rcci_parse_size within
 * its [min, max]) into *value; a STR parameter takes any text (its users
 * check the names they know) and leaves *value alone. Sets no error text. */
rcc_result_t rcci_param_parse(rcci_param_id_t id, const char *text, int64_t *value);

/* "64K" -> 65536. Accepts decimal digits with an optional K, M or G
 * (case-insensitive, powers of 1024) and nothing else. */
rcc_result_t rcci_parse_size(const char *text, int64_t min, int64_t max, int64_t *out);

#endif /* RINGCC_PARAMS_H */
