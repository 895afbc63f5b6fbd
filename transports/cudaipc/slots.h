/*
 * The cudaipc transport's protocol, plain C (unit-tested without a GPU):
 * how one direction of a connection moves messages through a ring of
 * receive slots in the receiver's device memory.
 *
 * The receiver owns, per connection, RCCI_CIPC_SLOTS slots of slot_bytes
 * of device memory and one page of host memory both processes map (the
 * device can store into it: the streams write the counters). A message is
 * cut into fragments of at most slot_bytes (a 0-byte message is one empty
 * fragment); fragment number f (counted over the life of the connection)
 * goes to slot f % RCCI_CIPC_SLOTS. Two counters, each stored by one side's
 * stream only, after the copy it vouches for:
 *   head: fragments written into the slots (the sender's stream, after its
 *         copy into the slot); a header per slot, stored by the sender's
 *         host thread before it queues the copy, says which message the
 *         fragment belongs to;
 *   tail: fragments copied out of the slots (the receiver's stream, after
 *         its copy out): the sender may reuse a slot once tail passes it.
 * So the data moves GPU to GPU with no message between the hosts per chunk:
 * each host only reads counters in memory it maps. Counters are 32-bit and
 * compared modulo 2^32.
 */
#ifndef RINGCC_CIPC_SLOTS_H
#define RINGCC_CIPC_SLOTS_H

#include <stddef.h>
#include <stdint.h>

#include "ringcc.h"
#include "transport.h"

/* 8 slots keep several fragments in flight each way, as the engine keeps
 * RCC_SLOTS chunks in flight. The slot size is the receiver's
 * RCC_CUDAIPC_SLOT_BYTES (8 MiB by default), announced in the hello: large
 * enough that the per-fragment cost (a host poll of the counter, a launch:
 * microseconds) is small beside the work on it, and that the engine's
 * device chunks (RCC_DEVICE_CHUNK_BYTES) fit one slot, so they are reduced
 * where they land (in place: transport.h). */
#define RCCI_CIPC_SLOTS 8

#define RCCI_CIPC_CHECKS 64

/* What the sender says about a fragment. */
typedef struct {
    uint32_t seq;   /* the message's tag */
    uint32_t frag;  /* its number within the message */
    uint64_t bytes; /* the whole message's */
    uint8_t sig[RCCI_SIG_BYTES];
    uint32_t flags; /* RCCI_CIPC_DIRECT: the payload is not in the slot (RCCI_SEND_DIRECT) */
    uint32_t unused;
} rcci_cipc_hdr_t;
#define RCCI_CIPC_DIRECT 1u
/* Stored by the sender's host into every slot's header when it starts
 * queuing (its fragments have no header from then on): a receiver that
 * is not queuing (it called another operation) reports that, not a
 * stale header. */
#define RCCI_CIPC_QUEUED 2u

/* The shared page; the counters on their own cache lines. */
typedef struct {
    volatile uint32_t head;
    /* Stored 1 by the sender once it has unmapped the slots (its close):
     * only then may the receiver free them (retired.h). */
    volatile uint32_t unmapped;
    /* Stored 1 by either end's queue_abort, before it lets its queued work
     * run through: that work still stores head and tail, which must not
     * pass for messages moved (transport.h, queue_test). */
    volatile uint32_t aborted;
    /* 1 from the receiver's set-up; 0 once the sender has given up (its
     * queue_abort, before its work runs through): the receiver's stream
     * waits for it after each queued message's head, so a chunk the sender
     * ran through is not reduced and forwarded on, which would carry it
     * past the ranks that can tell. The receiver's own queue_abort stores
     * it past every wait. */
    volatile uint32_t open;
    uint32_t pad0[12];
    volatile uint32_t tail;
    uint32_t pad1[15];
    rcci_cipc_hdr_t hdr[RCCI_CIPC_SLOTS];
    /* Queued fragments (transport.h, version 7) have no header: the host
     * cannot write one at the call, as the slot may still hold an earlier
     * fragment. The sender's stream stores one word per fragment here
     * instead (rcci_cipc_check_word), before head; kept for
     * RCCI_CIPC_CHECKS fragments, so the receiver's host may look late. */
    volatile uint32_t check[RCCI_CIPC_CHECKS];
} rcci_cipc_page_t;

/* Fragments of a message of `bytes` (at least 1), and where fragment k of
 * it lies (offset, length). */
uint32_t rcci_cipc_frags(uint64_t bytes, size_t slot_bytes);
void rcci_cipc_frag_span(uint64_t bytes, size_t slot_bytes, uint32_t k, uint64_t *off, size_t *len);

/* Whether the sender may write fragment `next` (a slot is free). */
int rcci_cipc_slot_free(uint32_t next, uint32_t tail);
/* Whether counter `c` has passed fragment `f` (c > f, modulo 2^32): for the
 * receiver, head over the fragment it wants; for completion, head or tail
 * over a message's last fragment. */
int rcci_cipc_passed(uint32_t c, uint32_t f);

/* Checks fragment `frag` of a message against the receive posted for it:
 * RCC_ERR_MISMATCH (other operation or message number, naming both through
 * `describe`), RCC_ERR_REMOTE (another length, or fragments out of order:
 * the peer broke the protocol). */
rcc_result_t rcci_cipc_check(const rcci_cipc_hdr_t *hdr, const rcci_tag_t *expect,
                             uint64_t expect_bytes, uint32_t frag, const char *peer,
                             const char *self, rcci_sig_describe_fn describe);

/* Queued messages: the check word of fragment `ticket`, a message of
 * `bytes` with `tag`: the ticket's low 8 bits, then 24 bits of a hash of
 * the signature and the length (the engine does not know the sequence
 * number at the call). rcci_cipc_check_queued compares the word found at
 * check[ticket % RCCI_CIPC_CHECKS] with the one expected: RCC_ERR_MISMATCH
 * naming `peer`. The sender overwrites that entry for fragment ticket +
 * RCCI_CIPC_CHECKS once its slot is free, so the word read is the
 * ticket's only if the receiver's tail, read after it, had not reached
 * that point (rcci_cipc_check_kept); otherwise the receiver looked too
 * late, and there is nothing to check. */
uint32_t rcci_cipc_check_word(const rcci_tag_t *tag, uint64_t bytes, uint32_t ticket);
int rcci_cipc_check_kept(uint32_t tail, uint32_t ticket);
rcc_result_t rcci_cipc_check_queued(uint32_t found, const rcci_tag_t *expect, uint64_t bytes,
                                    uint32_t ticket, const char *peer, const char *self,
                                    rcci_sig_describe_fn describe);

/* The hello each end sends once connected, over the control connection:
 * its receive side, for the peer to map. */
#define RCCI_CIPC_HELLO_MAGIC 0x43504943u /* "CIPC" */
#define RCCI_CIPC_VERSION 5 /* 2: the header's flags; 3: `unmapped`; 4: `check`; 5: `aborted`, `open` */
typedef struct {
    uint32_t magic, version;
    uint32_t slots, slot_bytes;
    int32_t device, pid;
    int32_t rank, unused;
    uint8_t page_handle[96];  /* RCCI_IPC_HANDLE_BYTES */
    uint8_t slots_handle[96]; /* slots x slot_bytes of device memory */
} rcci_cipc_hello_t;

/* Refuses a hello that is not one of this version: RCC_ERR_REMOTE naming `peer`. */
rcc_result_t rcci_cipc_hello_check(const rcci_cipc_hello_t *h, const char *peer);

#endif /* RINGCC_CIPC_SLOTS_H */
