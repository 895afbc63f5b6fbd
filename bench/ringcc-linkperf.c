/*
 * ringcc-linkperf — point-to-point bandwidth and latency between two ranks
 * over one transport, through the transport ops table alone (no engine, no
 * collectives): what a transport gets out of its link, as ib_write_bw or
 * iperf3 measure it.
 *
 *   ringcc-run -n 2 ringcc-linkperf [-t TRANSPORT] [-b MIN] [-e MAX] [-f FACTOR]
 *                                   [-n MSGS] [-W WINDOW] [-w WARMUP] [-B] [-c 0|1]
 *
 * Ranks meet through the usual launcher environment (RCC_RANK, RCC_ROOT, ...;
 * a communicator gives the rendezvous, the job secret and the address), then
 * open one connection of their own over TRANSPORT (default: the first of the
 * transports built that can start here, as the engine picks). For each size
 * from MIN to MAX (times FACTOR), rank 0 streams MSGS messages to rank 1
 * with WINDOW of them in flight (the receiver keeps WINDOW receives posted;
 * fewer where WINDOW messages would pass 64 MiB, at least one),
 * and the time runs until rank 1's 1-byte acknowledgement of the last one
 * arrives; -B streams both ways at once. Then a ping-pong of 2 x MSGS/10
 * (at least 10) messages of that size gives the one-way latency (half the
 * round trip), for sizes up to 1 MiB. Rank 0 prints one line per size:
 * MB/s (10^6 bytes per second, of payload: goodput), Gbit/s, and latency.
 * -c 1 checks every byte received (a pattern per message); by default
 * each message's first and last 8 bytes are checked. Exit status 1 on any
 * error or wrong byte, 2 for bad arguments.
 */
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "clock.h"
#include "comm.h"
#include "err.h"
#include "report.h"
#include "transport.h"

#define LP_NAME "ringcc-linkperf"
#define LP_TAG 0x11f /* the connection's tag: clear of the engine's */
#define LP_LAT_MAX (1u << 20)
#define LP_MEM (64u << 20) /* bytes in flight per direction at most: bounds the buffers */

typedef struct {
    const char *transport;
    size_t minbytes, maxbytes;
    long factor, msgs, window, warmup, check;
    int bidir;
    int registered; /* -r: buffers registered with the transport (zero-copy sends on ibverbs) */
    const char *json_path, *csv_path; /* --json, --csv: the results as data too ("-": stdout) */
} lp_opts_t;

/* The table's stream: stdout, or stderr when a --json/--csv report takes stdout. */
static FILE *lp_text;

typedef struct {
    const rcci_transport_t *tr;
    rcci_conn_t *conn;
    int rank;
    int64_t deadline_ns; /* per size: RCC_TIMEOUT from its start */
    int64_t timeout_ns;
    uint32_t seq; /* next message number, alike at both ends */
    long wrong;   /* bytes found wrong */
    rcci_mr_t **smr, **rmr; /* -r: each window place's registrations; else NULL */
} lp_link_t;

static void lp_usage(FILE *f)
{
    fprintf(f,
            "usage: ringcc-run -n 2 %s [-t TRANSPORT] [-b MIN] [-e MAX] [-f FACTOR] [-n MSGS]\n"
            "       [-W WINDOW] [-w WARMUP] [-B] [-r] [-c 0|1]\n"
            "  -t  transport (tcp, ibverbs, ...; default: RCC_TRANSPORT, else the first that\n"
            "      starts here)\n"
            "  -b, -e  smallest and largest message (8, 64K, 4M; default 1 and 64M)\n"
            "  -f  factor between sizes (default 4)\n"
            "  -n  messages per size (default 64; warmup and latency runs come on top)\n"
            "  -W  messages in flight (default 16; fewer where they would pass 64 MiB)\n"
            "  -w  warmup messages per size, not timed (default: 128 MiB of them, 8 to 1024;\n"
            "      a TCP connection's windows take about that long to open)\n"
            "  -B  both directions at once (bidirectional bandwidth)\n"
            "  -r  register the buffers with the transport first (reg_mem): ibverbs then sends\n"
            "      them without staging, the adapter reading them itself\n"
            "  -c  1: check every byte received; 0: the first and last 8 (default)\n"
            "  --json PATH, --csv PATH  also write the results as data to PATH ('-': stdout,\n"
            "      the table then goes to stderr); busbw_GBps is the link's GB/s, so that\n"
            "      bench/plot_busbw.py draws it beside the collectives\n",
            LP_NAME);
}

static void lp_die_usage(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", LP_NAME);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    lp_usage(stderr);
    exit(2);
}

static void lp_parse(int argc, char **argv, lp_opts_t *o)
{
    *o = (lp_opts_t){.transport = "",
                     .minbytes = 1,
                     .maxbytes = 64u << 20,
                     .factor = 4,
                     .msgs = 64,
                     .window = 16,
                     .warmup = -1};
    static const struct option longopts[] = {
        {"json", required_argument, NULL, 'J'}, {"csv", required_argument, NULL, 'V'}, {0}};
    int c;
    while ((c = getopt_long(argc, argv, "t:b:e:f:n:W:w:Brc:h", longopts, NULL)) != -1) {
        long *lv = NULL, lo = 0, hi = 0;
        switch (c) {
        case 't': o->transport = optarg; continue;
        case 'J': o->json_path = optarg; continue;
        case 'V': o->csv_path = optarg; continue;
        case 'B': o->bidir = 1; continue;
        case 'r': o->registered = 1; continue;
        case 'h': lp_usage(stdout); exit(0);
        case 'b':
        case 'e':
            if (bench_parse_size(optarg, c == 'b' ? &o->minbytes : &o->maxbytes))
                lp_die_usage("-%c: expected a size like 8, 64K or 32M, not '%s'", c, optarg);
            continue;
        case 'f': lv = &o->factor, lo = 2, hi = 1024; break;
        case 'n': lv = &o->msgs, lo = 1, hi = 100000000; break;
        case 'W': lv = &o->window, lo = 1, hi = 1024; break;
        case 'w': lv = &o->warmup, lo = 0, hi = 100000000; break;
        case 'c': lv = &o->check, lo = 0, hi = 1; break;
        default: lp_die_usage("unknown option");
        }
        if (bench_parse_int(optarg, lo, hi, lv))
            lp_die_usage("-%c: expected an integer from %ld to %ld, not '%s'", c, lo, hi, optarg);
    }
    if (optind < argc)
        lp_die_usage("unexpected argument '%s'", argv[optind]);
    if (o->minbytes > o->maxbytes)
        lp_die_usage("-b %zu is larger than -e %zu", o->minbytes, o->maxbytes);
    if (o->json_path && o->csv_path && !strcmp(o->json_path, "-") && !strcmp(o->csv_path, "-"))
        lp_die_usage("--json - and --csv - cannot both take stdout");
}

/* Rank 0's --json/--csv reports (NULL when not asked for). */
static void lp_reports_open(report_t *rep[2], const lp_opts_t *o, const char *transport)
{
    const char *paths[2] = {o->json_path, o->csv_path};
    const report_format_t formats[2] = {REPORT_JSON, REPORT_CSV};
    for (int k = 0; k < 2; k++) {
        rep[k] = NULL;
        if (!paths[k])
            continue;
        if (!(rep[k] = report_open(paths[k], formats[k], LP_NAME))) {
            fprintf(stderr, "%s: cannot write %s: %s\n", LP_NAME, paths[k], strerror(errno));
            exit(1);
        }
        report_field_t meta[] = {
            REPORT_S("impl", "ringcc-linkperf"), REPORT_S("transport", transport),
            REPORT_I("nranks", 2),               REPORT_I("bidirectional", o->bidir),
            REPORT_I("msgs", o->msgs),           REPORT_I("check", o->check),
        };
        report_meta(rep[k], meta, (int)(sizeof meta / sizeof meta[0]));
        report_meta_env(rep[k]);
    }
}

/* What message `seq` holds at byte i: cheap, and different per message. */
static inline uint8_t lp_byte(uint32_t seq, size_t i)
{
    return (uint8_t)((i * 0x9e3779b1u) >> 24 ^ seq * 31u ^ i);
}

static void lp_fill(uint8_t *p, size_t n, uint32_t seq, int all)
{
    if (all) {
        for (size_t i = 0; i < n; i++)
            p[i] = lp_byte(seq, i);
        return;
    }
    for (size_t i = 0; i < n && i < 8; i++)
        p[i] = lp_byte(seq, i);
    for (size_t i = n > 8 ? n - 8 : 0; i < n; i++)
        p[i] = lp_byte(seq, i);
}

static void lp_verify(lp_link_t *l, const uint8_t *p, size_t n, uint32_t seq, int all)
{
    for (size_t i = 0; i < n; i++) {
        if (!all && i == 8 && n > 16)
            i = n - 8;
        l->wrong += p[i] != lp_byte(seq, i);
    }
}

/* Waits for `req` (a send when `send`: then a writable socket counts, else
 * only arriving data wakes it, so a waiting receiver does not spin on a
 * shared core); the transport's error, or a timeout. Sleeps 1 ms at most:
 * the other direction moves in test too. */
static rcc_result_t lp_wait(lp_link_t *l, rcci_request_t *req, int send)
{
    for (;;) {
        int done;
        rcc_result_t res = l->tr->test(req, &done);
        if (res != RCC_SUCCESS || done)
            return res;
        if (rcci_now_ns() > l->deadline_ns)
            return rcci_error(RCC_ERR_TIMEOUT, "no progress on the link for RCC_TIMEOUT");
        int fd = l->tr->wait_fd(l->conn);
        struct pollfd p = {.fd = fd, .events = POLLIN | (send ? POLLOUT : 0)};
        if (fd >= 0)
            poll(&p, 1, 1);
    }
}

/* `mr`: buf's registration (-r), or NULL. */
static rcc_result_t lp_post(lp_link_t *l, int send, void *buf, size_t n, uint32_t seq,
                            rcci_mr_t *mr, rcci_request_t **req)
{
    rcci_tag_t tag = {.seq = seq};
    memset(tag.sig, 0, sizeof tag.sig);
    return send ? l->tr->isend(l->conn, buf, n, &tag, mr, req)
                : l->tr->irecv(l->conn, buf, n, &tag, mr, req);
}

/* Messages of `n` bytes in flight: WINDOW, within LP_MEM. */
static long lp_window(const lp_opts_t *o, size_t n)
{
    long fit = n > 0 ? (long)(LP_MEM / n) : o->window;
    return fit < 1 ? 1 : fit < o->window ? fit : o->window;
}

/* Bytes window place i needs: the largest size whose window reaches it. */
static size_t lp_place_bytes(const lp_opts_t *o, long i)
{
    size_t fit = LP_MEM / (size_t)(i + 1);
    size_t n = fit < o->maxbytes ? fit : o->maxbytes;
    return n ? n : 1;
}

/* Moves `count` messages of `n` bytes: sends when `send_on`, receives when
 * `recv_on` (both for -B), lp_window in flight each way. Buffers: one per
 * window place, filled once per message sent. */
static rcc_result_t lp_stream(lp_link_t *l, const lp_opts_t *o, size_t n, long count, int send_on,
                              int recv_on, uint8_t **sbuf, uint8_t **rbuf)
{
    rcc_result_t res = RCC_SUCCESS;
    long w = lp_window(o, n);
    rcci_request_t **sreq = calloc((size_t)w, sizeof *sreq),
                   **rreq = calloc((size_t)w, sizeof *rreq);
    uint32_t base = l->seq;
    long sent = 0, recvd = 0, sposted = 0, rposted = 0;
    while ((send_on && sent < count) || (recv_on && recvd < count)) {
        /* Keep both windows full, then retire the oldest of each. */
        while (recv_on && rposted < count && rposted - recvd < w) {
            RCC_CHECK(lp_post(l, 0, rbuf[rposted % w], n, base + (uint32_t)rposted,
                              l->rmr ? l->rmr[rposted % w] : NULL, &rreq[rposted % w]));
            rposted++;
        }
        while (send_on && sposted < count && sposted - sent < w) {
            lp_fill(sbuf[sposted % w], n, base + (uint32_t)sposted, o->check);
            RCC_CHECK(lp_post(l, 1, sbuf[sposted % w], n, base + (uint32_t)sposted,
                              l->smr ? l->smr[sposted % w] : NULL, &sreq[sposted % w]));
            sposted++;
        }
        if (recv_on && recvd < count) {
            RCC_CHECK(lp_wait(l, rreq[recvd % w], 0));
            lp_verify(l, rbuf[recvd % w], n, base + (uint32_t)recvd, o->check);
            recvd++;
        }
        if (send_on && sent < count) {
            int done;
            RCC_CHECK(l->tr->test(sreq[sent % w], &done));
            if (!done && !(recv_on && recvd < count)) {
                RCC_CHECK(lp_wait(l, sreq[sent % w], 1));
                done = 1;
            }
            sent += done;
        }
    }
    l->seq = base + (uint32_t)count;
out:
    free(sreq);
    free(rreq);
    return res;
}

/* One small message the other way: the end of a timed run. */
static rcc_result_t lp_ack(lp_link_t *l, int send)
{
    uint8_t b = 0;
    rcci_request_t *r;
    rcc_result_t res = lp_post(l, send, &b, 1, l->seq++, NULL, &r);
    return res == RCC_SUCCESS ? lp_wait(l, r, send) : res;
}

/* Warmup messages of `n` bytes: -w, or 128 MiB of them within [8, 1024]. */
static long lp_warmup(const lp_opts_t *o, size_t n)
{
    if (o->warmup >= 0)
        return o->warmup;
    size_t k = n ? (128u << 20) / n : 1024;
    return k < 8 ? 8 : k > 1024 ? 1024 : (long)k;
}

/* Streams one size; seconds from the first send to the acknowledgement. */
static rcc_result_t lp_bandwidth(lp_link_t *l, const lp_opts_t *o, size_t n, uint8_t **sbuf,
                                 uint8_t **rbuf, double *secs)
{
    rcc_result_t res = RCC_SUCCESS;
    int sender = l->rank == 0 || o->bidir, receiver = l->rank == 1 || o->bidir;
    long warmup = lp_warmup(o, n);
    if (warmup)
        RCC_CHECK(lp_stream(l, o, n, warmup, sender, receiver, sbuf, rbuf));
    /* Rank 1 says go once the warmup has arrived: a sender's sends complete
     * while their bytes still wait in its socket, which must not count. */
    RCC_CHECK(lp_ack(l, l->rank == 1));
    int64_t t0 = rcci_now_ns();
    RCC_CHECK(lp_stream(l, o, n, o->msgs, sender, receiver, sbuf, rbuf));
    RCC_CHECK(lp_ack(l, l->rank == 1)); /* rank 1 has all of it */
    *secs = (double)(rcci_now_ns() - t0) / 1e9;
out:
    return res;
}

/* Ping-pong: microseconds one way (half the round trip). */
static rcc_result_t lp_latency(lp_link_t *l, const lp_opts_t *o, size_t n, uint8_t *buf,
                               double *usec)
{
    rcc_result_t res = RCC_SUCCESS;
    long rounds = o->msgs / 10 < 10 ? 10 : o->msgs / 10;
    int64_t t0 = 0;
    for (long i = -2; i < rounds; i++) { /* two rounds untimed */
        if (i == 0)
            t0 = rcci_now_ns();
        for (int leg = 0; leg < 2; leg++) {
            rcci_request_t *r;
            int send = (leg == 0) == (l->rank == 0);
            if (send)
                lp_fill(buf, n, l->seq, o->check);
            RCC_CHECK(lp_post(l, send, buf, n, l->seq, l->rmr ? l->rmr[0] : NULL, &r));
            RCC_CHECK(lp_wait(l, r, send));
            if (!send)
                lp_verify(l, buf, n, l->seq, o->check);
            l->seq++;
        }
    }
    *usec = (double)(rcci_now_ns() - t0) / 1e3 / (double)rounds / 2;
out:
    return res;
}

/* The transport asked for (-t, else RCC_TRANSPORT), or the first that starts here; its
 * context. */
static rcc_result_t lp_open(struct rcc_comm *comm, const char *want, const rcci_transport_t **tr,
                            void **tctx)
{
    rcci_bootstrap_t *bs = comm->bootstrap;
    rcci_transport_env_t env = {.rank = comm->rank,
                                .nranks = comm->nranks,
                                .comm_id = comm->comm_id ^ 0x1f1f1f1f1f1f1f1full,
                                .describe_sig = rcci_sig_describe};
    memcpy(env.secret, rcci_bootstrap_secret(bs), sizeof env.secret);
    const rcci_addr_t *local = rcci_bootstrap_local_addr(bs);
    memcpy(&env.local_addr, &local->u, local->len);
    env.local_addr_len = local->len;
    char why[512] = "";
    for (int i = 0; rcci_transports[i]; i++) {
        const rcci_transport_t *t = rcci_transports[i];
        if (*want && strcmp(want, t->name) != 0)
            continue;
        if (t->init(&env, tctx) == RCC_SUCCESS) {
            *tr = t;
            return RCC_SUCCESS;
        }
        snprintf(why, sizeof why, "; %s: %s", t->name, rcci_tls_error());
    }
    return rcci_error(RCC_ERR_UNSUPPORTED, "no transport %s%s starts here%s", want,
                      *want ? "" : "at all", why);
}

/* -r: every window place's buffers registered once, as an application reusing its
 * buffers would (registration costs far more than a message). */
static rcc_result_t lp_register(lp_link_t *l, const lp_opts_t *o, void *tctx, uint8_t **sbuf,
                                uint8_t **rbuf)
{
    l->smr = calloc((size_t)o->window, sizeof *l->smr);
    l->rmr = calloc((size_t)o->window, sizeof *l->rmr);
    if (!l->smr || !l->rmr)
        return rcci_error(RCC_ERR_NO_MEMORY, "registrations");
    for (long i = 0; i < o->window; i++) {
        size_t n = lp_place_bytes(o, i);
        if (l->tr->reg_mem(tctx, sbuf[i], n, RCCI_MEM_HOST, &l->smr[i]) != RCC_SUCCESS ||
            l->tr->reg_mem(tctx, rbuf[i], n, RCCI_MEM_HOST, &l->rmr[i]) != RCC_SUCCESS)
            return rcci_error(RCC_ERR_SYSTEM, "-r: registering %zu bytes with %s: %s", n,
                              l->tr->name, rcci_tls_error());
    }
    return RCC_SUCCESS;
}

static void lp_deregister(lp_link_t *l, const lp_opts_t *o, void *tctx)
{
    for (long i = 0; l->smr && i < o->window; i++) {
        if (l->smr[i])
            l->tr->dereg_mem(tctx, l->smr[i]);
        if (l->rmr[i])
            l->tr->dereg_mem(tctx, l->rmr[i]);
    }
    free(l->smr);
    free(l->rmr);
    l->smr = l->rmr = NULL;
}

/* The connection: rank 0 listens, rank 1 connects, over the bootstrap. */
static rcc_result_t lp_connect(struct rcc_comm *comm, lp_link_t *l, void *tctx,
                               rcci_listener_t **listener)
{
    rcc_result_t res = RCC_SUCCESS;
    uint8_t handles[2][RCCI_HANDLE_BYTES] = {{0}};
    int64_t deadline = rcci_now_ns() + l->timeout_ns;
    if (comm->rank == 0)
        RCC_CHECK(l->tr->listen(tctx, handles[0], listener));
    RCC_CHECK(rcci_bootstrap_allgather(comm->bootstrap, handles, RCCI_HANDLE_BYTES));
    if (comm->rank == 1)
        RCC_CHECK(l->tr->connect(tctx, handles[0], LP_TAG, deadline, &l->conn));
    else
        RCC_CHECK(l->tr->accept(*listener, 1, LP_TAG, deadline, &l->conn));
out:
    return res;
}

static void lp_print_header(const lp_opts_t *o, const lp_link_t *l, struct rcc_comm *comm)
{
    char peer[128];
    rcci_bootstrap_peer_name(comm->bootstrap, 1, peer, sizeof peer);
    fprintf(lp_text, "# %s: %s, rank 0 %s %s, %ld messages per size%s%s\n", LP_NAME, l->tr->name,
            o->bidir ? "<->" : "->", peer, o->msgs,
            o->bidir ? ", both directions at once (MB/s: the sum)" : "",
            o->registered ? ", registered buffers (-r)" : "");
    fprintf(lp_text, "# %12s %8s %10s %10s %10s %10s %10s\n", "size(B)", "window", "msgs",
            "time(s)", "MB/s", "Gbit/s", "lat(us)");
}

int main(int argc, char **argv)
{
    lp_opts_t o;
    lp_parse(argc, argv, &o);
    if (!*o.transport)
        o.transport = getenv("RCC_TRANSPORT") ? getenv("RCC_TRANSPORT") : "";
    rcc_comm_t comm;
    rcc_result_t res = rcc_comm_init_env(&comm, NULL);
    if (res != RCC_SUCCESS) {
        fprintf(stderr, "%s: %s: %s\n", LP_NAME, rcc_strerror(res), rcc_last_error(NULL));
        return 1;
    }
    if (comm->nranks != 2) {
        fprintf(stderr, "%s: runs on 2 ranks, not %d (ringcc-run -n 2)\n", LP_NAME, comm->nranks);
        rcc_comm_destroy(comm);
        return 2;
    }
    lp_link_t l = {.rank = comm->rank, .timeout_ns = comm->timeout_ns};
    void *tctx = NULL;
    rcci_listener_t *listener = NULL;
    uint8_t **sbuf = calloc((size_t)o.window, sizeof *sbuf),
            **rbuf = calloc((size_t)o.window, sizeof *rbuf);
    for (long i = 0; i < o.window; i++) {
        sbuf[i] = calloc(1, lp_place_bytes(&o, i));
        rbuf[i] = calloc(1, lp_place_bytes(&o, i));
    }
    res = lp_open(comm, o.transport, &l.tr, &tctx);
    if (res == RCC_SUCCESS && o.registered)
        res = lp_register(&l, &o, tctx, sbuf, rbuf);
    if (res == RCC_SUCCESS)
        res = lp_connect(comm, &l, tctx, &listener);
    int to_stdout = (o.json_path && !strcmp(o.json_path, "-")) ||
                    (o.csv_path && !strcmp(o.csv_path, "-"));
    lp_text = to_stdout ? stderr : stdout;
    report_t *rep[2] = {NULL, NULL};
    if (res == RCC_SUCCESS && l.rank == 0) {
        lp_print_header(&o, &l, comm);
        lp_reports_open(rep, &o, l.tr->name);
    }
    for (size_t n = o.minbytes; res == RCC_SUCCESS && n <= o.maxbytes;) {
        double secs = 0, usec = -1;
        l.deadline_ns = rcci_now_ns() + l.timeout_ns;
        res = lp_bandwidth(&l, &o, n, sbuf, rbuf, &secs);
        if (res == RCC_SUCCESS && n <= LP_LAT_MAX)
            res = lp_latency(&l, &o, n, rbuf[0], &usec);
        if (res == RCC_SUCCESS && l.rank == 0) {
            double bytes = (double)n * (double)o.msgs * (o.bidir ? 2 : 1);
            char lat[32] = "-";
            if (usec >= 0)
                snprintf(lat, sizeof lat, "%.2f", usec);
            fprintf(lp_text, "  %12zu %8ld %10ld %10.4f %10.2f %10.3f %10s\n", n,
                    lp_window(&o, n), o.msgs, secs, bytes / secs / 1e6, bytes * 8 / secs / 1e9,
                    lat);
            fflush(lp_text);
            report_field_t row[] = {
                REPORT_I("size", n),
                REPORT_I("window", lp_window(&o, n)),
                REPORT_I("msgs", o.msgs),
                REPORT_D("time_s", secs),
                REPORT_D("MBps", bytes / secs / 1e6),
                REPORT_D("Gbps", bytes * 8 / secs / 1e9),
                REPORT_D("busbw_GBps", bytes / secs / 1e9),
                usec >= 0 ? REPORT_D("lat_us", usec) : REPORT_NIL("lat_us"),
            };
            for (int k = 0; k < 2; k++)
                if (rep[k])
                    report_row(rep[k], row, (int)(sizeof row / sizeof row[0]));
        }
        if (n == o.maxbytes || n > o.maxbytes / (size_t)o.factor)
            n = n == o.maxbytes ? o.maxbytes + 1 : o.maxbytes;
        else
            n = n ? n * (size_t)o.factor : 1;
    }
    if (res != RCC_SUCCESS)
        fprintf(stderr, "%s: rank %d: %s: %s\n", LP_NAME, l.rank, rcc_strerror(res),
                rcci_tls_error());
    if (l.wrong)
        fprintf(stderr, "%s: rank %d: %ld bytes received wrong\n", LP_NAME, l.rank, l.wrong);
    report_field_t sum[] = {REPORT_I("wrong_bytes_rank0", l.wrong),
                            REPORT_S("result", res == RCC_SUCCESS ? "ok" : rcc_strerror(res))};
    for (int k = 0; k < 2; k++)
        if (rep[k] && report_close(rep[k], sum, 2) != 0) {
            fprintf(stderr, "%s: writing the report failed: %s\n", LP_NAME, strerror(errno));
            res = RCC_ERR_SYSTEM;
        }
    if (l.conn)
        l.tr->close(l.conn);
    if (listener)
        l.tr->close_listener(listener);
    if (tctx) {
        lp_deregister(&l, &o, tctx);
        l.tr->fini(tctx);
    }
    for (long i = 0; i < o.window; i++)
        free(sbuf[i]), free(rbuf[i]);
    free(sbuf);
    free(rbuf);
    rcc_comm_destroy(comm);
    return res != RCC_SUCCESS || l.wrong ? 1 : 0;
}
