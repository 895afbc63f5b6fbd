/* Forks ranks, waits for them with a deadline, shares a page between them. */
#include "mp.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Under ASan, ranks run LeakSanitizer's check themselves: they end with
 * _exit, which skips the one at exit. */
#if defined(__SANITIZE_ADDRESS__)
#define MP_LSAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MP_LSAN 1
#endif
#endif
#ifdef MP_LSAN
#include <sanitizer/lsan_interface.h>
#endif

#define MP_SHARED_BYTES (1 << 20)
#define MP_ID_SLOTS 8

typedef struct {
    atomic_int id_ready[MP_ID_SLOTS];
    rcc_unique_id_t ids[MP_ID_SLOTS];
    atomic_int aborted; /* mp_abort_and_wait */
    _Alignas(64) char user[]; /* mp_shared: aligned for any type the tests keep there */
} mp_area_t;

static mp_area_t *mp_area;
static int mp_port;

/* A port for the run's root that is free now; rank 0 binds it moments
 * later (on every address, with SO_REUSEADDR, as the library does). Taken
 * below the kernel's ephemeral range: ports handed out for port-0 binds
 * and outgoing connections — other tests' sockets, this run's own — come
 * from that range and could take it in the window before rank 0 binds. */
static int mp_free_port(void)
{
    int low = 32768, high;
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
    if (f) {
        if (fscanf(f, "%d %d", &low, &high) != 2)
            low = 32768;
        fclose(f);
    }
    if (low > 65536)
        low = 65536;
    unsigned seed = (unsigned)getpid() ^ (unsigned)time(NULL) * 2654435761u;
    for (int attempt = 0; attempt < 200; attempt++) {
        int port = low > 11024 ? 10000 + (int)(rand_r(&seed) % (unsigned)(low - 11024)) : 0;
        int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
        struct sockaddr_in a = {.sin_family = AF_INET,
                                .sin_addr.s_addr = htonl(INADDR_ANY),
                                .sin_port = htons((uint16_t)port)};
        socklen_t len = sizeof a;
        if (fd < 0) {
            perror("mp_free_port");
            exit(2);
        }
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        int ok = bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
                 getsockname(fd, (struct sockaddr *)&a, &len) == 0;
        close(fd);
        if (ok)
            return ntohs(a.sin_port);
    }
    fprintf(stderr, "mp_free_port: no free port below %d after 200 tries\n", low);
    exit(2);
}

int mp_root_port(void) { return mp_port; }

int mp_quick(void)
{
    const char *q = getenv("RCC_TEST_QUICK");
    return q && *q && strcmp(q, "0") != 0;
}

int mp_file_has(const char *path, const char *text)
{
    FILE *f = fopen(path, "r");
    char line[2048];
    int found = 0;
    while (f && !found && fgets(line, sizeof line, f))
        found = strstr(line, text) != NULL;
    if (f)
        fclose(f);
    return found;
}

int mp_max_ranks(void)
{
    const char *m = getenv("RCC_TEST_MAX_RANKS");
    return m && *m ? atoi(m) : 1 << 30;
}

size_t mp_scaled(size_t n) { return mp_quick() && n >= 1000000 ? (n / 16) | (n & 1) : n; }

void *mp_shared(size_t *size)
{
    if (size)
        *size = MP_SHARED_BYTES - sizeof(mp_area_t);
    return mp_area->user;
}

static double mp_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

rcc_result_t mp_bcast_unique_id(int rank, int slot, rcc_unique_id_t *id)
{
    if (rank == 0) {
        rcc_result_t res = rcc_get_unique_id(&mp_area->ids[slot]);
        if (res != RCC_SUCCESS)
            return res;
        atomic_store(&mp_area->id_ready[slot], 1);
    }
    double deadline = mp_now() + 60;
    while (!atomic_load(&mp_area->id_ready[slot])) {
        if (mp_now() > deadline)
            return RCC_ERR_TIMEOUT;
        usleep(1000);
    }
    *id = mp_area->ids[slot];
    return RCC_SUCCESS;
}

void mp_abort_and_wait(rcc_comm_t comm, int ranks)
{
    rcc_comm_abort(comm);
    atomic_fetch_add(&mp_area->aborted, 1);
    double deadline = mp_now() + 20;
    while (atomic_load(&mp_area->aborted) < ranks && mp_now() < deadline)
        usleep(1000);
}

rcc_comm_t mp_comm(int timeout_ms)
{
    rcc_config_t config = RCC_CONFIG_INITIALIZER;
    config.timeout_ms = timeout_ms;
    rcc_comm_t comm = NULL;
    rcc_result_t res = rcc_comm_init_env(&comm, &config);
    if (res != RCC_SUCCESS) {
        fprintf(stderr, "rank %s: rcc_comm_init_env: %s: %s\n", getenv("RCC_RANK"),
                rcc_strerror(res), rcc_last_error(NULL));
        exit(90);
    }
    return comm;
}

/* Before hung ranks are killed: every thread's backtrace of each, by one gdb
 * per rank side by side (at most 20 s), so that a hang in CI says where it
 * is. Skipped without gdb and under valgrind (whose ranks gdb cannot read). */
static void mp_print_stacks(const pid_t *pids, int nranks)
{
    const char *preload = getenv("LD_PRELOAD");
    if (system("command -v gdb >/dev/null 2>&1") != 0 ||
        (preload && strstr(preload, "vgpreload"))) {
        fprintf(stderr, "mp: no stacks of the hung ranks (no gdb, or under valgrind)\n");
        return;
    }
    pid_t gdb[64] = {0};
    FILE *out[64] = {0};
    for (int r = 0; r < nranks && r < 64; r++) {
        if (pids[r] <= 0 || !(out[r] = tmpfile()))
            continue;
        fflush(stderr);
        gdb[r] = fork();
        if (gdb[r] == 0) {
            char target[16];
            snprintf(target, sizeof target, "%d", (int)pids[r]);
            dup2(fileno(out[r]), 1);
            dup2(fileno(out[r]), 2);
            execlp("timeout", "timeout", "-k", "2", "20", "gdb", "-batch", "-nx", "-p", target,
                   "-ex", "thread apply all bt", (char *)NULL);
            _exit(127);
        }
    }
    for (int r = 0; r < nranks && r < 64; r++) {
        if (gdb[r] > 0)
            waitpid(gdb[r], NULL, 0);
        if (!out[r])
            continue;
        fprintf(stderr, "mp: rank %d (pid %d) is hung; its threads' stacks (gdb):\n", r,
                (int)pids[r]);
        rewind(out[r]);
        char line[1024];
        while (fgets(line, sizeof line, out[r]))
            fprintf(stderr, "[%d] %s", r, line);
        fclose(out[r]);
    }
}

int mp_run_status(int nranks, mp_rank_fn fn, void *arg, int timeout_s, int *statuses)
{
    mp_area =
        mmap(NULL, MP_SHARED_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (mp_area == MAP_FAILED) {
        perror("mmap");
        return -1;
    }
    mp_port = mp_free_port();
    char root[64], secret[65];
    snprintf(root, sizeof root, "127.0.0.1:%d", mp_port);
    srand((unsigned)getpid() ^ (unsigned)time(NULL));
    for (int i = 0; i < 64; i++)
        secret[i] = "0123456789abcdef"[rand() % 16];
    secret[64] = '\0';
    fflush(stdout);
    fflush(stderr);
    pid_t *pids = calloc((size_t)nranks, sizeof *pids);
    for (int r = 0; r < nranks; r++) {
        pids[r] = fork();
        if (pids[r] < 0) {
            perror("fork");
            exit(2);
        }
        if (pids[r] == 0) {
            free(pids); /* the parent's, not the rank's (LeakSanitizer would see it lost) */
            char v[16];
            snprintf(v, sizeof v, "%d", r);
            setenv("RCC_RANK", v, 1);
            snprintf(v, sizeof v, "%d", nranks);
            setenv("RCC_NRANKS", v, 1);
            setenv("RCC_ROOT", root, 1);
            setenv("RCC_SECRET", secret, 1);
            int rc = fn(r, nranks, arg);
#ifdef MP_LSAN
            if (__lsan_do_recoverable_leak_check() && rc == 0)
                rc = 23; /* LeakSanitizer's exit status */
#endif
            fflush(stdout);
            fflush(stderr);
            _exit(rc);
        }
        statuses[r] = -1;
    }
    double deadline = mp_now() + timeout_s;
    int left = nranks;
    while (left > 0 && mp_now() < deadline) {
        int st;
        pid_t p = waitpid(-1, &st, WNOHANG);
        if (p <= 0) {
            usleep(2000);
            continue;
        }
        for (int r = 0; r < nranks; r++) {
            if (pids[r] != p)
                continue;
            statuses[r] = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
            pids[r] = 0;
            left--;
        }
    }
    if (left > 0)
        mp_print_stacks(pids, nranks);
    for (int r = 0; r < nranks; r++) {
        if (pids[r] > 0) {
            fprintf(stderr, "mp: rank %d still running after %d s: killed\n", r, timeout_s);
            kill(pids[r], SIGKILL);
            waitpid(pids[r], NULL, 0);
        }
    }
    free(pids);
    munmap(mp_area, MP_SHARED_BYTES);
    mp_area = NULL;
    return 0;
}

int mp_run(int nranks, mp_rank_fn fn, void *arg, int timeout_s)
{
    int statuses[1024];
    if (nranks > 1024)
        return -1;
    if (nranks > mp_max_ranks())
        return 0;
    mp_run_status(nranks, fn, arg, timeout_s, statuses);
    int ok = 0;
    for (int r = 0; r < nranks; r++) {
        if (statuses[r] != 0) {
            fprintf(stderr, "mp: %d ranks: rank %d ended with status %d\n", nranks, r, statuses[r]);
            ok = -1;
        }
    }
    return ok;
}
