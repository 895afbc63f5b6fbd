/*
 * Strangers kept out. A real 4-rank job runs allreduces (every algorithm),
 * alltoall and point-to-point messages, each checked against a naive
 * reference, while a fifth process, not a member of the job, attacks
 * (a) the root's port during the rendezvous, and (b) every rank's data
 * listener after init (and checks that the bootstrap's port is closed):
 * an almost-right secret, an all-zero secret, another protocol's bytes, a
 * wrong version, truncated and oversized hellos, random bytes, port scans
 * (close and RST), slow-loris connections (silent, or a byte now and then),
 * a flood of silent connections and a churn of connect-and-close.
 *
 * Judged: the attacker sees every connection it left open closed by the
 * rank, in time; the job's results are exact and no round or init takes
 * long; each rank logs why (RCC_DEBUG=INFO); each rank's descriptors are
 * the same before init and after destroy, and the stranger's connections
 * held by a rank stay within the documented cap and end at zero. Leaks:
 * built with -Db_sanitize=address, each rank runs LeakSanitizer at its end.
 */
#include <arpa/inet.h>
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#ifdef __SANITIZE_ADDRESS__
#include <sanitizer/lsan_interface.h>
#endif

#include "../check_main.h"
#include "comm.h" /* the listeners' addresses, for the attacker */
#include "mp.h"
#include "testdata.h"

#define JOB_RANKS 4
#define ATTACKER JOB_RANKS      /* the mp process that attacks */
#define STRANGER_IP "127.0.0.2" /* the attacker's source: ranks count its connections */
#define FLOOD 100               /* silent connections per target, above the cap of 64 */
#define STRANGERS_CAP 64        /* socket.h: strangers held per listening socket */
#define PROMPT_S 5.0            /* a hello that lies is refused within this */
#define SLOW_S 25.0             /* 10 s for a hello, plus sweeps and a loaded machine */
#define CHURN_S 3.0             /* connect-and-close for this long */
#define CHURN_PER_S 200         /* per target */
#define ROUND_MAX_S 10.0        /* a round of the job's work normally takes milliseconds */
#define INIT_MAX_S 8.0          /* less than the 10 s a silent stranger may take */
#define HELLO_BYTES 96          /* socket.c's hello: magic, version, kind, secret, ... */
#define HELLO_MAGIC 0x48434352u /* "RCCH" */

enum { SC_ROOT, SC_DATA };
enum { ST_START, ST_ROOT_ATTACKED, ST_DATA_ATTACKING, ST_DONE };

typedef struct {
    atomic_int stage;
    atomic_int ready; /* job ranks that published their listeners */
    struct sockaddr_in data[JOB_RANKS], boot[JOB_RANKS];
} shared_t;

typedef struct {
    int scenario;
    char logdir[64];
} hostile_arg_t;

/* ---- the attacks ------------------------------------------------------------ */

typedef enum {
    C_WRONG_SECRET,
    C_ZERO_SECRET,
    C_WRONG_MAGIC,
    C_WRONG_VERSION,
    C_TRUNCATED,
    C_TRUNCATED_CLOSE,
    C_OVERSIZED,
    C_RANDOM,
    C_SCAN_CLOSE,
    C_SCAN_RST,
    C_SILENT,
    C_DRIP,
    C_FLOOD,
    C_CHURN,
    NCASES
} case_t;

/* within_s: the rank must close the connection within this; 0: the attacker
 * closes it itself (the job must just not notice). `log`: what the rank's
 * log must say (NULL: nothing required). */
static const struct {
    const char *name;
    double within_s;
    const char *log;
} cases[NCASES] = {
    [C_WRONG_SECRET] = {"hello, secret off by one bit", PROMPT_S, "wrong job secret"},
    [C_ZERO_SECRET] = {"hello, no secret (zeros)", PROMPT_S, "wrong job secret"},
    [C_WRONG_MAGIC] = {"an HTTP request", PROMPT_S, "bad magic"},
    [C_WRONG_VERSION] = {"hello of version 99, right secret", PROMPT_S, "protocol version"},
    [C_TRUNCATED] = {"40 bytes of a right hello, then silence", SLOW_S, "no complete hello"},
    [C_TRUNCATED_CLOSE] = {"40 bytes of a hello, then close", 0, "closed before its hello"},
    [C_OVERSIZED] = {"hello + 1 MiB, secret off by one bit", PROMPT_S, NULL},
    [C_RANDOM] = {"4 KiB of random bytes", PROMPT_S, NULL},
    [C_SCAN_CLOSE] = {"port scan: connect, close", 0, NULL},
    [C_SCAN_RST] = {"port scan: connect, RST", 0, NULL},
    [C_SILENT] = {"slow loris: silent", SLOW_S, NULL},
    [C_DRIP] = {"slow loris: a right byte every 0.5 s", SLOW_S, NULL},
    [C_FLOOD] = {"flood: 100 silent connections", SLOW_S, "too many unauthenticated"},
    [C_CHURN] = {"churn: connect, close, 200/s for 3 s", 0, NULL},
};

typedef struct {
    int fd;
    case_t c;
    double t0;
    double closed_s; /* when the rank closed it, after t0; < 0: not yet */
    int dripped;
    double next_drip;
} att_conn_t;

typedef struct {
    att_conn_t *conn;
    int n, cap;
    uint8_t secret[32]; /* the job's, from RCC_SECRET: the attacker knows it (a */
                        /* truncated or wrong-version hello must not get in with it) */
    int churned, churn_refused;
} attack_t;

static void put_le(uint8_t *p, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void make_hello(uint8_t out[HELLO_BYTES], uint16_t version, const uint8_t *secret)
{
    memset(out, 0, HELLO_BYTES);
    put_le(out, HELLO_MAGIC, 4);
    put_le(out + 4, version, 2);
    put_le(out + 6, 3, 2); /* a data connection */
    if (secret)
        memcpy(out + 8, secret, 32);
    put_le(out + 52, JOB_RANKS, 4);
}

/* A blocking connect from STRANGER_IP (bounded by SO_SNDTIMEO), then
 * nonblocking; -1 with *err on failure. */
static int att_connect(const struct sockaddr_in *to, int *err)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in me = {.sin_family = AF_INET};
    inet_pton(AF_INET, STRANGER_IP, &me.sin_addr);
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    /* The thousands of ports this process closes first sit in TIME_WAIT
     * for a minute; without SO_REUSEADDR they would keep a later job's root
     * (bound to 0.0.0.0 with SO_REUSEADDR) off any of those port numbers. */
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (fd < 0 || bind(fd, (struct sockaddr *)&me, sizeof me) != 0 ||
        connect(fd, (const struct sockaddr *)to, sizeof *to) != 0) {
        *err = errno;
        if (fd >= 0)
            close(fd);
        return -1;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    return fd;
}

static void att_rst(int fd)
{
    struct linger l = {1, 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    close(fd);
}

/* Opens one connection of case c to `to` and sends its bytes. */
static int att_open(attack_t *a, case_t c, const struct sockaddr_in *to)
{
    int err = 0, fd = att_connect(to, &err);
    if (fd < 0) {
        fprintf(stderr, "attacker: cannot connect for '%s': %s\n", cases[c].name, strerror(err));
        return 1;
    }
    uint8_t hello[HELLO_BYTES], off[32];
    memcpy(off, a->secret, 32);
    off[31] ^= 1;
    static uint8_t junk[1 << 20];
    if (!junk[0]) {
        for (size_t i = 0; i < sizeof junk; i++)
            junk[i] = (uint8_t)(rand() >> 7);
        junk[0] = 'x'; /* not the magic's first byte */
    }
    const char *http = "GET / HTTP/1.1\r\nHost: ringcc\r\n\r\n";
    const void *send_buf = NULL;
    size_t send_len = 0;
    switch (c) {
    case C_WRONG_SECRET: make_hello(hello, 1, off), send_buf = hello, send_len = HELLO_BYTES; break;
    case C_ZERO_SECRET: make_hello(hello, 1, NULL), send_buf = hello, send_len = HELLO_BYTES; break;
    case C_WRONG_MAGIC: send_buf = http, send_len = strlen(http); break;
    case C_WRONG_VERSION:
        make_hello(hello, 99, a->secret), send_buf = hello, send_len = HELLO_BYTES;
        break;
    case C_TRUNCATED:
    case C_TRUNCATED_CLOSE: make_hello(hello, 1, a->secret), send_buf = hello, send_len = 40; break;
    case C_RANDOM: send_buf = junk, send_len = 4096; break;
    default: break;
    }
    if (c == C_OVERSIZED) { /* as much of hello + 1 MiB as the socket takes */
        make_hello(hello, 1, off);
        if (send(fd, hello, HELLO_BYTES, MSG_NOSIGNAL) != HELLO_BYTES)
            fprintf(stderr, "attacker: short send\n");
        size_t sent = 0;
        ssize_t w;
        while (sent < sizeof junk &&
               (w = send(fd, junk + sent, sizeof junk - sent, MSG_NOSIGNAL)) > 0)
            sent += (size_t)w;
    } else if (send_len && send(fd, send_buf, send_len, MSG_NOSIGNAL) != (ssize_t)send_len) {
        fprintf(stderr, "attacker: short send for '%s'\n", cases[c].name);
    }
    if (cases[c].within_s == 0) { /* the attacker leaves */
        if (c == C_SCAN_RST)
            att_rst(fd);
        else
            close(fd);
        return 0;
    }
    if (a->n == a->cap) {
        a->cap = a->cap ? 2 * a->cap : 256;
        a->conn = realloc(a->conn, sizeof *a->conn * (size_t)a->cap);
    }
    a->conn[a->n++] = (att_conn_t){
        .fd = fd, .c = c, .t0 = td_now_s(), .closed_s = -1, .next_drip = td_now_s() + 0.5};
    return 0;
}

/* Every case against one target; the flood first, so that the cases
 * after it are the youngest strangers (a flood pushes out the oldest) and
 * are closed for what they do. */
static int att_all(attack_t *a, const struct sockaddr_in *to)
{
    int bad = 0;
    for (int k = 0; k < FLOOD; k++)
        bad |= att_open(a, C_FLOOD, to);
    for (int c = 0; c < NCASES; c++)
        if (c != C_FLOOD && c != C_CHURN)
            bad |= att_open(a, (case_t)c, to);
    return bad;
}

/* One look at the open connections (up to `ms`): notes those the rank
 * closed, drips a byte into the slow ones. Returns how many are open. */
static int att_watch(attack_t *a, int ms)
{
    struct pollfd *p = calloc((size_t)a->n + 1, sizeof *p);
    int open = 0;
    double now = td_now_s();
    for (int i = 0; i < a->n; i++) {
        att_conn_t *k = &a->conn[i];
        p[i] = (struct pollfd){.fd = k->closed_s < 0 ? k->fd : -1, .events = POLLIN | POLLRDHUP};
        if (k->closed_s >= 0)
            continue;
        open++;
        if (k->c == C_DRIP && now >= k->next_drip && k->dripped < HELLO_BYTES - 1) {
            uint8_t hello[HELLO_BYTES];
            make_hello(hello, 1, a->secret);
            if (send(k->fd, hello + k->dripped, 1, MSG_NOSIGNAL) == 1)
                k->dripped++;
            k->next_drip = now + 0.5;
        }
    }
    poll(p, (nfds_t)a->n, ms);
    now = td_now_s();
    for (int i = 0; i < a->n; i++) {
        att_conn_t *k = &a->conn[i];
        if (k->closed_s >= 0 || !p[i].revents)
            continue;
        char buf[4096];
        ssize_t r = recv(k->fd, buf, sizeof buf, MSG_DONTWAIT);
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
            k->closed_s = now - k->t0;
            close(k->fd);
            open--;
        } else if (r > 0) {
            fprintf(stderr, "attacker: a rank answered a '%s' connection\n", cases[k->c].name);
        }
    }
    free(p);
    return open;
}

/* Connect-and-close at CHURN_PER_S per target for CHURN_S, watching the
 * other connections meanwhile. */
static void att_churn(attack_t *a, const struct sockaddr_in *to, int ntargets)
{
    double end = td_now_s() + CHURN_S;
    while (td_now_s() < end) {
        for (int t = 0; t < ntargets; t++) {
            for (int k = 0; k < CHURN_PER_S / 10; k++) {
                int err, fd = att_connect(&to[t], &err);
                if (fd < 0) {
                    a->churn_refused++;
                    continue;
                }
                a->churned++;
                if (k % 2)
                    att_rst(fd);
                else
                    close(fd);
            }
        }
        att_watch(a, 100);
    }
}

/* The verdict per case; 0 when every connection was closed by the ranks in
 * time. Closes what is left. */
static int att_judge(attack_t *a, const char *where)
{
    int bad = 0;
    fprintf(stderr, "attacker (%s):\n  %-42s %6s %8s %10s\n", where, "case", "conns", "closed",
            "slowest s");
    for (int c = 0; c < NCASES; c++) {
        int total = 0, closed = 0;
        double worst = 0;
        for (int i = 0; i < a->n; i++) {
            if (a->conn[i].c != (case_t)c)
                continue;
            total++;
            if (a->conn[i].closed_s >= 0 && a->conn[i].closed_s <= cases[c].within_s)
                closed++;
            if (a->conn[i].closed_s > worst)
                worst = a->conn[i].closed_s;
        }
        if (c == C_CHURN) {
            fprintf(stderr, "  %-42s %6d %8s %10s (%d refused: backlog full or listener gone)\n",
                    cases[c].name, a->churned, "-", "-", a->churn_refused);
            continue;
        }
        if (cases[c].within_s == 0) {
            fprintf(stderr, "  %-42s %6s %8s %10s (the attacker left)\n", cases[c].name, "-", "-",
                    "-");
            continue;
        }
        int ok = closed == total;
        bad |= !ok;
        fprintf(stderr, "  %-42s %6d %8d %10.2f %s\n", cases[c].name, total, closed, worst,
                ok ? "rejected" : "NOT REJECTED IN TIME");
    }
    for (int i = 0; i < a->n; i++)
        if (a->conn[i].closed_s < 0)
            close(a->conn[i].fd);
    free(a->conn);
    a->conn = NULL, a->n = a->cap = 0;
    return bad;
}

static void att_init(attack_t *a)
{
    memset(a, 0, sizeof *a);
    const char *hex = getenv("RCC_SECRET");
    for (int i = 0; i < 32 && hex && strlen(hex) >= 64; i++) {
        unsigned v;
        sscanf(hex + 2 * i, "%2x", &v);
        a->secret[i] = (uint8_t)v;
    }
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) { /* the flood holds some 500 */
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    srand(12345);
}

/* Waits until everything is closed or `until`; returns how many are open. */
static int att_wait_closed(attack_t *a, double until)
{
    int open;
    while ((open = att_watch(a, 100)) > 0 && td_now_s() < until)
        ;
    return open;
}

static int wait_stage(shared_t *sh, int stage, double timeout_s)
{
    double until = td_now_s() + timeout_s;
    while (atomic_load(&sh->stage) < stage) {
        if (td_now_s() > until)
            return 1;
        usleep(2000);
    }
    return 0;
}

/* (a) The root's port, while the rendezvous waits for ranks 1..3. */
static int attacker_root(shared_t *sh)
{
    attack_t a;
    att_init(&a);
    struct sockaddr_in root = {.sin_family = AF_INET, .sin_port = htons((uint16_t)mp_root_port())};
    inet_pton(AF_INET, "127.0.0.1", &root.sin_addr);
    double until = td_now_s() + 30;
    int err = 0, fd;
    while ((fd = att_connect(&root, &err)) < 0 && td_now_s() < until)
        usleep(10000); /* rank 0 is not listening yet */
    if (fd < 0) {
        atomic_store(&sh->stage, ST_DONE);
        MP_FAIL("attacker: the root never listened: %s", strerror(err));
    }
    close(fd);
    int bad = att_all(&a, &root);
    /* The lies must be refused while the rendezvous still runs. */
    double t = td_now_s();
    while (td_now_s() < t + PROMPT_S) {
        att_watch(&a, 100);
        int prompt_open = 0;
        for (int i = 0; i < a.n; i++)
            prompt_open += a.conn[i].closed_s < 0 && cases[a.conn[i].c].within_s == PROMPT_S;
        if (!prompt_open)
            break;
    }
    atomic_store(&sh->stage, ST_ROOT_ATTACKED); /* ranks 1..3 join now */
    att_churn(&a, &root, 1);
    att_wait_closed(&a, td_now_s() + SLOW_S);
    bad |= att_judge(&a, "the root's port during the rendezvous");
    atomic_store(&sh->stage, ST_DONE);
    return bad;
}

/* (b) Every rank's data listener, while the job runs. */
static int attacker_data(shared_t *sh)
{
    attack_t a;
    att_init(&a);
    double until = td_now_s() + 60;
    while (atomic_load(&sh->ready) < JOB_RANKS && td_now_s() < until)
        usleep(2000);
    if (atomic_load(&sh->ready) < JOB_RANKS) {
        atomic_store(&sh->stage, ST_DONE);
        MP_FAIL("attacker: the job ranks never published their listeners");
    }
    int bad = 0;
    for (int r = 0; r < JOB_RANKS; r++) { /* the bootstrap is done with its port */
        int err = 0, fd = att_connect(&sh->boot[r], &err);
        if (fd >= 0 || err != ECONNREFUSED) {
            fprintf(stderr, "attacker: rank %d's bootstrap port %u still answers after init (%s)\n",
                    r, ntohs(sh->boot[r].sin_port), fd >= 0 ? "connected" : strerror(err));
            bad = 1;
        }
        if (fd >= 0)
            close(fd);
    }
    for (int r = 0; r < JOB_RANKS; r++)
        bad |= att_all(&a, &sh->data[r]);
    atomic_store(&sh->stage, ST_DATA_ATTACKING); /* the job's new connections start now */
    att_churn(&a, sh->data, JOB_RANKS);
    att_wait_closed(&a, td_now_s() + SLOW_S);
    bad |= att_judge(&a, "every rank's data listener after init");
    atomic_store(&sh->stage, ST_DONE);
    return bad;
}

/* ---- the job -------------------------------------------------------------- */

/* Descriptors of this process (except the log file, open for the process's
 * life); *strangers: how many are connections from STRANGER_IP. */
static int count_fds(const char *logdir, int *strangers)
{
    DIR *d = opendir("/proc/self/fd");
    int n = 0, s = 0;
    struct dirent *e;
    struct in_addr stranger;
    inet_pton(AF_INET, STRANGER_IP, &stranger);
    while (d && (e = readdir(d))) {
        int fd = atoi(e->d_name);
        if (e->d_name[0] == '.' || fd == dirfd(d))
            continue;
        char path[64], link[256];
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
        ssize_t k = readlink(path, link, sizeof link - 1);
        link[k > 0 ? k : 0] = '\0';
        if (!strncmp(link, logdir, strlen(logdir)))
            continue;
        n++;
        struct sockaddr_in a;
        socklen_t len = sizeof a;
        if (getpeername(fd, (struct sockaddr *)&a, &len) == 0 && a.sin_family == AF_INET &&
            a.sin_addr.s_addr == stranger.s_addr)
            s++;
    }
    if (d)
        closedir(d);
    if (strangers)
        *strangers = s;
    return n;
}

static int check_result(const char *what, int rank, const char *got, const char *want, size_t count,
                        rcc_datatype_t dt)
{
    char desc[128];
    snprintf(desc, sizeof desc, "rank %d: %s", rank, what);
    return td_compare(desc, got, want, count, dt);
}

/* One round of the job's work, every result checked; 0 when right.
 * Allreduce sizes take each algorithm on 4 ranks: recursive doubling,
 * Rabenseifner's, the pipelined ring. `p2p`: alltoall and a ring of sends
 * too (the user lane's connections are made on their first round). */
static int job_round(rcc_comm_t comm, int rank, unsigned seed, int p2p)
{
    static const size_t counts[] = {1, 1000, 65536, 1u << 20};
    rcc_datatype_t dt = seed % 2 ? RCC_FLOAT32 : RCC_INT32;
    size_t es = rcc_datatype_size(dt);
    int bad = 0;
    char *buf = malloc((1u << 20) * es), *ref = malloc((1u << 20) * es);
    for (size_t c = 0; c < sizeof counts / sizeof counts[0] && !bad; c++) {
        td_fill(buf, 0, counts[c], seed, rank, dt, RCC_SUM);
        rcc_result_t res = rcc_allreduce(buf, buf, counts[c], dt, RCC_SUM, comm);
        if (res != RCC_SUCCESS) {
            fprintf(stderr, "rank %d: allreduce of %zu: %s: %s\n", rank, counts[c],
                    rcc_strerror(res), rcc_last_error(comm));
            bad = 1;
            break;
        }
        td_reference(ref, 0, counts[c], NULL, JOB_RANKS, seed, dt, RCC_SUM);
        bad |= check_result("allreduce", rank, buf, ref, counts[c], dt);
    }
    if (p2p && !bad) {
        const size_t count = 1000;
        char *sbuf = malloc(JOB_RANKS * count * es), *rbuf = malloc(JOB_RANKS * count * es);
        for (int p = 0; p < JOB_RANKS; p++)
            td_fill(sbuf + p * count * es, p * count, count, seed, rank, dt, RCC_SUM);
        rcc_result_t res = rcc_alltoall(sbuf, rbuf, count, dt, comm);
        for (int q = 0; q < JOB_RANKS && res == RCC_SUCCESS; q++) {
            td_fill(ref, (size_t)rank * count, count, seed, q, dt, RCC_SUM);
            bad |= check_result("alltoall", rank, rbuf + q * count * es, ref, count, dt);
        }
        int next = (rank + 1) % JOB_RANKS, prev = (rank + JOB_RANKS - 1) % JOB_RANKS;
        if (res == RCC_SUCCESS) {
            td_fill(sbuf, 0, count, seed + 7, rank, dt, RCC_SUM);
            rcc_group_start();
            rcc_send(sbuf, count, dt, next, comm);
            rcc_recv(rbuf, count, dt, prev, comm);
            res = rcc_group_end();
            td_fill(ref, 0, count, seed + 7, prev, dt, RCC_SUM);
            if (res == RCC_SUCCESS)
                bad |= check_result("send/recv", rank, rbuf, ref, count, dt);
        }
        if (res != RCC_SUCCESS) {
            fprintf(stderr, "rank %d: point-to-point: %s: %s\n", rank, rcc_strerror(res),
                    rcc_last_error(comm));
            bad = 1;
        }
        free(sbuf), free(rbuf);
    }
    free(buf), free(ref);
    return bad;
}

/* Destroys the communicator, then waits (briefly: rank 0's rendezvous
 * thread may still be closing its sockets) for the descriptors to be those
 * from before init; runs LeakSanitizer where built with it. */
static int job_end(rcc_comm_t comm, int rank, const char *logdir, int fds_before, int bad)
{
    bad |= td_finish(comm, 0);
    int fds_after, until = 50;
    while ((fds_after = count_fds(logdir, NULL)) != fds_before && until-- > 0)
        usleep(100000);
    fprintf(stderr, "rank %d: descriptors before init %d, after destroy %d\n", rank, fds_before,
            fds_after);
    if (fds_after != fds_before) {
        fprintf(stderr, "rank %d: %d descriptors leaked\n", rank, fds_after - fds_before);
        bad = 1;
    }
#ifdef __SANITIZE_ADDRESS__
    if (__lsan_do_recoverable_leak_check()) {
        fprintf(stderr, "rank %d: LeakSanitizer found leaks\n", rank);
        bad = 1;
    }
#endif
    return bad;
}

static rcc_comm_t job_init(double *took_s)
{
    setenv("RCC_NRANKS", "4", 1); /* the fifth process is the attacker */
    double t = td_now_s();
    rcc_comm_t comm = mp_comm(60000);
    *took_s = td_now_s() - t;
    return comm;
}

/* (a): rank 0 serves the rendezvous at once; the others join once the
 * attack is under way. */
static int job_root(int rank, shared_t *sh, const char *logdir)
{
    int fds_before = count_fds(logdir, NULL);
    if (rank != 0 && wait_stage(sh, ST_ROOT_ATTACKED, 60))
        MP_FAIL("rank %d: the attacker never got going", rank);
    double init_s;
    rcc_comm_t comm = job_init(&init_s);
    int bad = job_round(comm, rank, 1, 1);
    fprintf(stderr, "rank %d: init took %.2f s under attack\n", rank, init_s);
    if (rank != 0 && init_s > INIT_MAX_S) {
        fprintf(stderr, "rank %d: the rendezvous was held up (%.1f s)\n", rank, init_s);
        bad = 1;
    }
    wait_stage(sh, ST_DONE, 60); /* keep the job up while the attacker judges */
    return job_end(comm, rank, logdir, fds_before, bad);
}

/* (b): the job works on while its listeners are attacked. */
static int job_data(int rank, shared_t *sh, const char *logdir)
{
    int fds_before = count_fds(logdir, NULL), strangers = 0, most = 0, rounds = 0;
    double init_s, slowest = 0;
    rcc_comm_t comm = job_init(&init_s);
    int bad = job_round(comm, rank, 0, 0); /* the ring's and the collectives' lanes */
    rcci_addr_t data;
    rcci_wire_addr_t wire;
    memcpy(&wire, comm->p2p.handles + (size_t)rank * RCCI_HANDLE_BYTES, sizeof wire);
    if (rcci_addr_from_wire(&wire, &data) != RCC_SUCCESS || data.u.sa.sa_family != AF_INET)
        MP_FAIL("rank %d: the data listener's handle is not an IPv4 address", rank);
    sh->data[rank] = data.u.in;
    sh->boot[rank] = rcci_bootstrap_local_addr(comm->bootstrap)->u.in;
    atomic_fetch_add(&sh->ready, 1);
    if (wait_stage(sh, ST_DATA_ATTACKING, 60))
        MP_FAIL("rank %d: the attacker never got going", rank);
    double until = td_now_s() + 120;
    for (int stop = 0; !bad && !stop;) {
        double t = td_now_s();
        bad |= job_round(comm, rank, (unsigned)++rounds, 1);
        if (td_now_s() - t > slowest)
            slowest = td_now_s() - t;
        count_fds(logdir, &strangers);
        if (strangers > most)
            most = strangers;
        usleep(20000);
        /* The ranks stop together: each saw the attacker end, or not. */
        stop = atomic_load(&sh->stage) == ST_DONE || td_now_s() > until;
        if (!bad && rcc_allreduce(&stop, &stop, 1, RCC_INT32, RCC_MAX, comm) != RCC_SUCCESS)
            MP_FAIL("rank %d: stop vote: %s", rank, rcc_last_error(comm));
    }
    /* What the stranger left open is closed while the job idles. */
    until = td_now_s() + SLOW_S;
    while (count_fds(logdir, &strangers) && strangers > 0 && td_now_s() < until)
        usleep(100000);
    if (!bad)
        bad |= job_round(comm, rank, 999, 1);
    fprintf(stderr,
            "rank %d: %d rounds under attack, slowest %.3f s; at most %d of the stranger's "
            "connections held, %d at the end\n",
            rank, rounds, slowest, most, strangers);
    if (slowest > ROUND_MAX_S || most > STRANGERS_CAP || strangers > 0) {
        fprintf(stderr, "rank %d: disturbed by the stranger\n", rank);
        bad = 1;
    }
    return job_end(comm, rank, logdir, fds_before, bad);
}

static int hostile_rank(int rank, int n, void *varg)
{
    (void)n;
    hostile_arg_t *arg = varg;
    shared_t *sh = mp_shared(NULL);
    if (rank == ATTACKER)
        return arg->scenario == SC_ROOT ? attacker_root(sh) : attacker_data(sh);
    char path[128];
    snprintf(path, sizeof path, "%s/rank%d.log", arg->logdir, rank);
    setenv("RCC_DEBUG", "INFO", 1);
    setenv("RCC_DEBUG_FILE", path, 1);
    return arg->scenario == SC_ROOT ? job_root(rank, sh, arg->logdir)
                                    : job_data(rank, sh, arg->logdir);
}

/* ---- the tests -------------------------------------------------------------- */

static void run_scenario(int scenario)
{
    hostile_arg_t arg = {.scenario = scenario};
    snprintf(arg.logdir, sizeof arg.logdir, "/tmp/rcc-hostile-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(arg.logdir));
    int ok = mp_run(JOB_RANKS + 1, hostile_rank, &arg, 240);
    /* Each attacked rank says why it refused (the root: rank 0). */
    int missing = 0;
    for (int r = 0; r < (scenario == SC_ROOT ? 1 : JOB_RANKS); r++) {
        char path[128];
        snprintf(path, sizeof path, "%s/rank%d.log", arg.logdir, r);
        if (!mp_file_has(path, "refused a connection from")) {
            fprintf(stderr, "%s: no warning about a refused connection\n", path);
            missing++;
        }
        for (int c = 0; c < NCASES; c++) {
            /* The rendezvous ends, closing its strangers, before 10 s. */
            if (scenario == SC_ROOT && cases[c].within_s == SLOW_S && c != C_FLOOD)
                continue;
            if (cases[c].log && !mp_file_has(path, cases[c].log)) {
                fprintf(stderr, "%s: no line says '%s' (%s)\n", path, cases[c].log, cases[c].name);
                missing++;
            }
        }
    }
    for (int r = 0; r < JOB_RANKS; r++) {
        char path[128];
        snprintf(path, sizeof path, "%s/rank%d.log", arg.logdir, r);
        unlink(path);
    }
    rmdir(arg.logdir);
    ck_assert_int_eq(ok, 0);
    ck_assert_int_eq(missing, 0);
}

START_TEST(root_port_during_rendezvous) { run_scenario(SC_ROOT); }
END_TEST

START_TEST(data_ports_after_init) { run_scenario(SC_DATA); }
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("hostile");
    TCase *tc = tcase_create("strangers");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, root_port_during_rendezvous);
    tcase_add_test(tc, data_ports_after_init);
    suite_add_tcase(s, tc);
    return s;
}

RCC_TEST_MAIN(make_suite)
