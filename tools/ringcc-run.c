/*
 * ringcc-run — starts the N ranks of a ringcc job on this host and multiplexes their output.
 *
 *   ringcc-run [options] -n N PROGRAM [ARGS...]
 *
 * Every rank is PROGRAM, fork+exec'd with RCC_RANK, RCC_NRANKS, RCC_ROOT and RCC_SECRET in its
 * environment (what rcc_comm_init_env() reads). Each rank's stdout and stderr arrive through
 * pipes and are re-emitted whole line by whole line, prefixed "[rank] ". The first rank to fail
 * stops the job: the others get SIGTERM, then SIGKILL after a grace period, and ringcc-run exits
 * with the failed rank's status.
 *
 * One thread, one poll() loop: the rank pipes plus a signalfd for SIGCHLD and the signals that
 * are forwarded; deadlines (timeout, kill grace) are poll timeouts. No busy waiting.
 *
 * The ranks share one process group of their own (led by rank 0), not the launcher's: a group
 * kill then reaches whatever the ranks started (sh -c 'a; b' forks), the terminal's Ctrl-C
 * reaches the ranks once (forwarded by the launcher) rather than twice, and the launcher never
 * signals itself or the shell pipeline it runs in. PR_SET_PDEATHSIG covers the launcher being
 * SIGKILLed.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define RUN_NAME "ringcc-run"
#define RUN_MAX_RANKS 1024
#define RUN_GRACE_MS 5000  /* SIGTERM -> SIGKILL */
#define RUN_GIVEUP_MS 5000 /* SIGKILL -> stop waiting for unkillable (D state) ranks */
#define RUN_DRAIN_MS 1000  /* after the last rank exits, wait this long for pipe EOF */
#define RUN_READ_BYTES 65536
#define RUN_LINE_MAX 65536  /* a longer line is split, each piece prefixed */
#define RUN_SECRET_BYTES 32 /* 64 hex characters */
#define RUN_EXIT_USAGE 2
#define RUN_EXIT_LAUNCH 1 /* the launcher itself failed (not a rank) */
#define RUN_EXIT_TIMEOUT 124
#define RUN_STACKS_S 20 /* --stacks: gdb's time, for all ranks together */

/* Signals forwarded to the ranks. One already ignored at start (nohup, a background job of a
 * non-interactive shell) stays ignored, as a shell would leave it. */
static const int run_fwd_signals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
#define RUN_NFWD ((int)(sizeof run_fwd_signals / sizeof run_fwd_signals[0]))

struct run_stream {
    int fd;     /* read end of the pipe, -1 once closed */
    int out_fd; /* where its lines go: 1 or 2 */
    char *buf;  /* the incomplete last line */
    size_t len, cap;
};

struct run_rank {
    pid_t pid; /* 0 once reaped */
    struct run_stream st[2];
};

enum { RUN_RUNNING, RUN_TERM_SENT, RUN_KILL_SENT };

static struct {
    /* options */
    int nranks;
    int prefix;
    int verbose;
    int stacks; /* --stacks */
    double timeout_s;
    char **argv; /* PROGRAM ARGS..., NULL-terminated */
    /* state */
    struct run_rank *ranks;
    int started; /* ranks forked */
    int live;    /* ranks not yet reaped */
    pid_t pgid;  /* the ranks' process group (rank 0's pid), 0 before rank 0 exists */
    int sfd;     /* signalfd */
    int stopping;
    int64_t term_at_ms; /* when SIGTERM went out */
    int exit_code;      /* -1 until the job's outcome is decided */
    int reraise_sig;    /* the launcher was told to stop by this signal */
    int out_broken[3];  /* our stdout/stderr went away (EPIPE): drop what goes there */
    /* restored in the children before exec */
    sigset_t orig_mask;
    struct sigaction orig_pipe;
    struct rlimit orig_nofile;
    int fwd_ignored[RUN_NFWD];
    /* scratch for building prefixed output */
    char *obuf;
    size_t ocap;
} run = {.prefix = 1, .sfd = -1, .exit_code = -1};

static int64_t run_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Writes everything or gives up on that descriptor for good (EPIPE, closed terminal): a
 * consumer that went away must not stop the job. Waits out EAGAIN in case the descriptor we
 * inherited is non-blocking. */
static void run_write_all(int fd, const char *p, size_t n)
{
    if (fd >= 0 && fd <= 2 && run.out_broken[fd])
        return;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w > 0) {
            p += w;
            n -= (size_t)w;
        } else if (w < 0 && errno == EINTR) {
            continue;
        } else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            struct pollfd pfd = {.fd = fd, .events = POLLOUT};
            (void)poll(&pfd, 1, -1);
        } else {
            if (fd >= 0 && fd <= 2)
                run.out_broken[fd] = 1;
            return;
        }
    }
}

/* Our own messages: one write per message, so they never split a rank's line either. */
__attribute__((format(printf, 1, 2))) static void run_msg(const char *fmt, ...)
{
    char buf[1024];
    int n = snprintf(buf, sizeof buf, "%s: ", RUN_NAME);
    va_list ap;
    va_start(ap, fmt);
    n += vsnprintf(buf + n, sizeof buf - (size_t)n - 1, fmt, ap);
    va_end(ap);
    if (n > (int)sizeof buf - 2)
        n = (int)sizeof buf - 2;
    buf[n++] = '\n';
    run_write_all(2, buf, (size_t)n);
}

static void run_oom(void)
{
    run_msg("out of memory");
    exit(RUN_EXIT_LAUNCH);
}

static void run_usage_error(const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s: %s\nTry '%s --help' for more information.\n", RUN_NAME, buf, RUN_NAME);
    exit(RUN_EXIT_USAGE);
}

static void run_help(void)
{
    /* clang-format off */
    printf(
        "Usage: %s [options] -n N PROGRAM [ARGS...]\n"
        "Start N ranks of a ringcc job on this host, each running PROGRAM ARGS.\n"
        "\n"
        "Options (they end at PROGRAM, or at --):\n"
        "  -n, --nranks N       number of ranks to start, 1 to %d (required)\n"
        "      --np N           the same as --nranks\n"
        "  -q, --no-prefix      pass the ranks' output on without the \"[rank] \" prefix\n"
        "                       (still line by line, so lines of different ranks never mix)\n"
        "  -t, --timeout SECS   stop the job after SECS seconds (decimals allowed); exit 124\n"
        "      --stacks         at the timeout, before stopping the ranks, print every\n"
        "                       running rank's thread backtraces (gdb -p; each line\n"
        "                       prefixed \"[rank] \", on stderr; at most %d s in all)\n"
        "  -v, --verbose        say what is started and how each rank ended\n"
        "  -h, --help           show this help and exit\n"
        "\n"
        "Environment of each rank (what rcc_comm_init_env() reads):\n"
        "  RCC_RANK     the rank, 0 to N-1\n"
        "  RCC_NRANKS   N\n"
        "  RCC_ROOT     127.0.0.1:PORT, where rank 0 serves the rendezvous; PORT is a port\n"
        "               that was free when the launcher started, below the ephemeral range\n"
        "               (ip_local_port_range), so no auto-bound socket can take it meanwhile\n"
        "  RCC_SECRET   64 random hex characters (getrandom), the job secret\n"
        "  RCC_RUN_TTY  1 when the launcher's stderr is a terminal (benchmarks then show\n"
        "               progress on /dev/tty, past the line-by-line relay)\n"
        "RCC_ROOT and RCC_SECRET are left as they are when already set (and not empty); the\n"
        "rest of the environment is passed on unchanged.\n"
        "\n"
        "Output: each line a rank writes to stdout (stderr) goes to the launcher's stdout\n"
        "(stderr) as \"[rank] line\", written whole; an unterminated last line is flushed with\n"
        "a newline when the rank's pipe closes; lines over %d bytes are split. Rank 0 reads\n"
        "the launcher's stdin when that is not a terminal; the other ranks read /dev/null.\n"
        "\n"
        "Failure: when a rank exits with a non-zero status or is killed by a signal, the\n"
        "launcher says which, sends SIGTERM to the other ranks and their children (the job's\n"
        "process group), SIGKILL %d s later, and exits with that rank's status (128+signal for\n"
        "a signal). SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to the launcher are forwarded to\n"
        "the ranks the same way; a second one sends SIGKILL at once; the launcher then ends\n"
        "by the same signal. When every rank has exited, processes the ranks left behind in\n"
        "the job's process group are killed. If the launcher is killed, the ranks get SIGKILL.\n"
        "\n"
        "Exit status: 0 when every rank exited 0; the first failed rank's status; 124 on\n"
        "--timeout; 127 when PROGRAM is not found, 126 when it cannot be run; 2 for bad\n"
        "arguments; 1 when the launcher itself fails.\n"
        "\n"
        "Example:\n"
        "  %s -n 4 ringcc-perf -b 8 -e 128M -f 2\n",
        RUN_NAME, RUN_MAX_RANKS, RUN_STACKS_S, RUN_LINE_MAX, RUN_GRACE_MS / 1000, RUN_NAME);
    /* clang-format on */
}

static void run_parse_args(int argc, char **argv)
{
    /* clang-format off */
    static const struct option longopts[] = {
        {"nranks", required_argument, NULL, 'n'},
        {"np", required_argument, NULL, 'n'},
        {"no-prefix", no_argument, NULL, 'q'},
        {"timeout", required_argument, NULL, 't'},
        {"stacks", no_argument, NULL, 'S'},
        {"verbose", no_argument, NULL, 'v'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    /* clang-format on */
    opterr = 0; /* our own messages, with the exit status we document */
    int c;
    /* "+": stop at PROGRAM, so its own options are left alone; ":": report a missing value. */
    while ((c = getopt_long(argc, argv, "+:n:qt:vh", longopts, NULL)) != -1) {
        switch (c) {
        case 'n': {
            char *end;
            errno = 0;
            long v = strtol(optarg, &end, 10);
            if (errno || end == optarg || *end || v < 1 || v > RUN_MAX_RANKS)
                run_usage_error("-n: the number of ranks must be an integer from 1 to %d, "
                                "not '%s'",
                                RUN_MAX_RANKS, optarg);
            run.nranks = (int)v;
            break;
        }
        case 'q': run.prefix = 0; break;
        case 't': {
            char *end;
            errno = 0;
            double v = strtod(optarg, &end);
            if (errno || end == optarg || *end || !isfinite(v) || v <= 0 || v > 1e9)
                run_usage_error("--timeout: expected a positive number of seconds, not '%s'",
                                optarg);
            run.timeout_s = v;
            break;
        }
        case 'v': run.verbose = 1; break;
        case 'S': run.stacks = 1; break;
        case 'h': run_help(); exit(0);
        case ':': run_usage_error("option '%s' needs a value", argv[optind - 1]); break;
        default:
            if (optopt)
                run_usage_error("unknown option '-%c'", optopt);
            else
                run_usage_error("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (run.nranks == 0)
        run_usage_error("missing -n N, the number of ranks");
    if (optind >= argc)
        run_usage_error("missing PROGRAM to run");
    run.argv = argv + optind;
}

/* 127 when PROGRAM is nowhere on PATH, 126 when found but not runnable, 0 when fine; checked
 * once here so a typo gives one clear message rather than N failed ranks. */
static int run_check_program(const char *prog, char *why, size_t whylen)
{
    struct stat sb;
    if (strchr(prog, '/')) {
        if (stat(prog, &sb) != 0) {
            snprintf(why, whylen, "%s", strerror(errno));
            return 127;
        }
        if (S_ISDIR(sb.st_mode) || access(prog, X_OK) != 0) {
            snprintf(why, whylen, "%s",
                     S_ISDIR(sb.st_mode) ? "is a directory" : "permission denied");
            return 126;
        }
        return 0;
    }
    const char *path = getenv("PATH");
    if (!path)
        path = "/bin:/usr/bin"; /* execvp's default */
    int found_unrunnable = 0;
    const char *p = path;
    for (;;) {
        const char *colon = strchr(p, ':');
        size_t dlen = colon ? (size_t)(colon - p) : strlen(p);
        char full[PATH_MAX];
        int n = dlen ? snprintf(full, sizeof full, "%.*s/%s", (int)dlen, p, prog)
                     : snprintf(full, sizeof full, "%s", prog); /* empty entry: cwd */
        if (n > 0 && (size_t)n < sizeof full && stat(full, &sb) == 0 && !S_ISDIR(sb.st_mode)) {
            if (access(full, X_OK) == 0)
                return 0;
            found_unrunnable = 1;
        }
        if (!colon)
            break;
        p = colon + 1;
    }
    snprintf(why, whylen, "%s", found_unrunnable ? "permission denied" : "command not found");
    return found_unrunnable ? 126 : 127;
}

/* The lowest port the kernel hands out by itself (connect, bind to port 0). */
static int run_ephemeral_low(void)
{
    int low = 32768; /* Linux's default */
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "re");
    if (f) {
        if (fscanf(f, "%d", &low) != 1)
            low = 32768;
        fclose(f);
    }
    return low;
}

/* A port that is free now; rank 0 binds it moments later (the address must be known
 * before any rank exists, as torchrun's MASTER_PORT is). Chosen at random below the
 * ephemeral range, on every address as rank 0 listens: in between, a socket that connects
 * or binds port 0 (a test running beside us, this job's own ranks) cannot be given it. */
static int run_free_port(void)
{
    enum { SPAN = 12000 }; /* the ports below the ephemeral range chosen from */
    int low = run_ephemeral_low();
    int base = low - SPAN > 1024 ? low - SPAN : 1024, span = low - base;
    if (span < 64) /* an odd range: let the kernel choose */
        base = 0, span = 1;
    for (int attempt = 0; attempt < 256; attempt++) {
        uint32_t r = 0;
        if (getrandom(&r, sizeof r, 0) != (ssize_t)sizeof r)
            r = (uint32_t)getpid() * 2654435761u + (uint32_t)attempt;
        int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (s < 0)
            return -1;
        struct sockaddr_in a = {.sin_family = AF_INET};
        a.sin_addr.s_addr = htonl(INADDR_ANY);
        a.sin_port = htons((uint16_t)(base ? base + (int)(r % (uint32_t)span) : 0));
        socklen_t alen = sizeof a;
        int port = -1;
        if (bind(s, (struct sockaddr *)&a, sizeof a) == 0 &&
            getsockname(s, (struct sockaddr *)&a, &alen) == 0)
            port = ntohs(a.sin_port);
        close(s);
        if (port > 0)
            return port;
    }
    errno = EADDRINUSE;
    return -1;
}

static int run_random_hex(char *out, size_t nbytes)
{
    unsigned char raw[RUN_SECRET_BYTES];
    size_t got = 0;
    if (nbytes > sizeof raw)
        return -1;
    while (got < nbytes) {
        ssize_t r = getrandom(raw + got, nbytes - got, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        got += (size_t)r;
    }
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < nbytes; i++) {
        out[2 * i] = hex[raw[i] >> 4];
        out[2 * i + 1] = hex[raw[i] & 15];
    }
    out[2 * nbytes] = '\0';
    return 0;
}

static int run_env_is_set(const char *name)
{
    const char *v = getenv(name);
    return v && *v;
}

static void run_setup_env(void)
{
    char buf[128];
    snprintf(buf, sizeof buf, "%d", run.nranks);
    if (setenv("RCC_NRANKS", buf, 1) != 0)
        run_oom();
    if (!run_env_is_set("RCC_ROOT")) {
        int port = run_free_port();
        if (port <= 0) {
            run_msg("cannot find a free TCP port on 127.0.0.1: %s", strerror(errno));
            exit(RUN_EXIT_LAUNCH);
        }
        snprintf(buf, sizeof buf, "127.0.0.1:%d", port);
        if (setenv("RCC_ROOT", buf, 1) != 0)
            run_oom();
    }
    if (!run_env_is_set("RCC_SECRET")) {
        if (run_random_hex(buf, RUN_SECRET_BYTES) != 0) {
            run_msg("getrandom failed: %s", strerror(errno));
            exit(RUN_EXIT_LAUNCH);
        }
        if (setenv("RCC_SECRET", buf, 1) != 0)
            run_oom();
    }
    if (isatty(STDERR_FILENO) && setenv("RCC_RUN_TTY", "1", 1) != 0)
        run_oom();
}

/* Pipes for 1024 ranks need more descriptors than the usual soft limit of 1024. The ranks get
 * the original limit back: a program using select() must not see descriptors over 1023. */
static void run_raise_nofile(void)
{
    if (getrlimit(RLIMIT_NOFILE, &run.orig_nofile) != 0)
        return;
    rlim_t need = (rlim_t)run.nranks * 2 + 64;
    if (run.orig_nofile.rlim_cur != RLIM_INFINITY && run.orig_nofile.rlim_cur < need) {
        struct rlimit r = run.orig_nofile;
        r.rlim_cur = (r.rlim_max == RLIM_INFINITY || r.rlim_max >= need) ? need : r.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &r) != 0 || r.rlim_cur < need) {
            run_msg("%d ranks need %lu file descriptors; the limit is %lu (ulimit -n)", run.nranks,
                    (unsigned long)need, (unsigned long)r.rlim_cur);
            exit(RUN_EXIT_LAUNCH);
        }
    }
}

/* Fds 0-2 must be open, or a pipe could land on one and be clobbered by the dup2s below. */
static void run_ensure_std_fds(void)
{
    for (int fd = 0; fd <= 2; fd++) {
        if (fcntl(fd, F_GETFD) < 0 && errno == EBADF) {
            int n = open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
            if (n < 0)
                exit(RUN_EXIT_LAUNCH);
            if (n != fd) { /* cannot happen: lowest free fd */
                dup2(n, fd);
                close(n);
            }
        }
    }
}

static void run_setup_signals(void)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGCHLD);
    for (int i = 0; i < RUN_NFWD; i++) {
        struct sigaction old;
        sigaction(run_fwd_signals[i], NULL, &old);
        run.fwd_ignored[i] = old.sa_handler == SIG_IGN;
        if (!run.fwd_ignored[i])
            sigaddset(&set, run_fwd_signals[i]);
    }
    if (sigprocmask(SIG_BLOCK, &set, &run.orig_mask) != 0) {
        run_msg("sigprocmask: %s", strerror(errno));
        exit(RUN_EXIT_LAUNCH);
    }
    run.sfd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
    if (run.sfd < 0) {
        run_msg("signalfd: %s", strerror(errno));
        exit(RUN_EXIT_LAUNCH);
    }
    /* A reader that goes away (| head) must not kill the launcher and orphan the job. */
    struct sigaction ign = {.sa_handler = SIG_IGN};
    sigemptyset(&ign.sa_mask);
    sigaction(SIGPIPE, &ign, &run.orig_pipe);
}

/* In the child, between fork and exec. */
static void __attribute__((noreturn))
run_child(int rank, const int out_w[2], int stdin_fd, pid_t launcher)
{
    /* Rank 0 founds the job's group, the others join it (the parent does the same, so the
     * group exists whichever of the two runs first). */
    setpgid(0, run.pgid);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != launcher) /* the launcher died before prctl took effect */
        _exit(RUN_EXIT_LAUNCH);
    if (stdin_fd != 0 && dup2(stdin_fd, 0) < 0)
        _exit(RUN_EXIT_LAUNCH);
    if (dup2(out_w[0], 1) < 0 || dup2(out_w[1], 2) < 0)
        _exit(RUN_EXIT_LAUNCH);
    /* Every other descriptor of ours is O_CLOEXEC. */
    sigaction(SIGPIPE, &run.orig_pipe, NULL);
    sigprocmask(SIG_SETMASK, &run.orig_mask, NULL);
    setrlimit(RLIMIT_NOFILE, &run.orig_nofile);
    char buf[16];
    snprintf(buf, sizeof buf, "%d", rank);
    setenv("RCC_RANK", buf, 1);
    execvp(run.argv[0], run.argv);
    int e = errno;
    char msg[512];
    int n = snprintf(msg, sizeof msg, "%s: cannot execute %s: %s\n", RUN_NAME, run.argv[0],
                     strerror(e));
    if (n > 0)
        (void)!write(2, msg, (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1);
    _exit(e == ENOENT ? 127 : 126);
}

static int run_spawn(int rank, int stdin_fd)
{
    int po[2], pe[2];
    if (pipe2(po, O_CLOEXEC) != 0)
        return -1;
    if (pipe2(pe, O_CLOEXEC) != 0) {
        close(po[0]);
        close(po[1]);
        return -1;
    }
    int wr[2] = {po[1], pe[1]};
    pid_t launcher = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(po[0]), close(po[1]), close(pe[0]), close(pe[1]);
        errno = e;
        return -1;
    }
    if (pid == 0)
        run_child(rank, wr, stdin_fd, launcher);
    if (rank == 0)
        run.pgid = pid;
    setpgid(pid, run.pgid); /* may fail harmlessly once the child has exec'd */
    close(po[1]);
    close(pe[1]);
    struct run_rank *r = &run.ranks[rank];
    r->pid = pid;
    int rd[2] = {po[0], pe[0]};
    for (int s = 0; s < 2; s++) {
        fcntl(rd[s], F_SETFL, fcntl(rd[s], F_GETFL) | O_NONBLOCK);
        r->st[s].fd = rd[s];
        r->st[s].out_fd = s + 1;
    }
    run.started++;
    run.live++;
    return 0;
}

/* Emits buf[0..n) — whole lines, each ending in '\n' — with the rank prefix, in one write. */
static void run_emit_lines(int rank, int out_fd, const char *buf, size_t n)
{
    if (!run.prefix) {
        run_write_all(out_fd, buf, n);
        return;
    }
    char pfx[16];
    int plen = snprintf(pfx, sizeof pfx, "[%d] ", rank);
    size_t lines = 0;
    for (size_t i = 0; i < n; i++)
        lines += buf[i] == '\n';
    size_t need = n + lines * (size_t)plen;
    if (need > run.ocap) {
        char *nb = realloc(run.obuf, need);
        if (!nb)
            run_oom();
        run.obuf = nb;
        run.ocap = need;
    }
    char *o = run.obuf;
    const char *p = buf, *end = buf + n;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t l = (size_t)(nl - p) + 1;
        memcpy(o, pfx, (size_t)plen);
        memcpy(o + plen, p, l);
        o += (size_t)plen + l;
        p += l;
    }
    run_write_all(out_fd, run.obuf, (size_t)(o - run.obuf));
}

/* Appends to a stream's incomplete line. */
static void run_keep_partial(struct run_stream *st, const char *p, size_t n)
{
    if (st->len + n + 1 > st->cap) { /* +1: room for the '\n' a flush adds */
        size_t ncap = st->cap ? st->cap : 256;
        while (ncap < st->len + n + 1)
            ncap *= 2;
        char *nb = realloc(st->buf, ncap);
        if (!nb)
            run_oom();
        st->buf = nb;
        st->cap = ncap;
    }
    memcpy(st->buf + st->len, p, n);
    st->len += n;
}

/* The unterminated rest of a stream, as a line of its own. */
static void run_flush_partial(int rank, struct run_stream *st)
{
    if (st->len == 0)
        return;
    st->buf[st->len++] = '\n';
    run_emit_lines(rank, st->out_fd, st->buf, st->len);
    st->len = 0;
}

static void run_close_stream(int rank, struct run_stream *st)
{
    run_flush_partial(rank, st);
    close(st->fd);
    st->fd = -1;
    free(st->buf);
    st->buf = NULL;
    st->len = st->cap = 0;
}

/* One read from a stream; returns 1 if data came (there may be more), 0 otherwise. Reads into
 * one shared buffer: a stream keeps memory only for its incomplete line. */
static int run_read_stream(int rank, struct run_stream *st)
{
    static char scratch[RUN_READ_BYTES];
    ssize_t r = read(st->fd, scratch, sizeof scratch);
    if (r < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK))
        return 0;
    if (r <= 0) { /* EOF, or an error that will not go away */
        run_close_stream(rank, st);
        return 0;
    }
    const char *p = scratch, *end = scratch + r;
    const char *last = memrchr(p, '\n', (size_t)r);
    if (last) {
        if (st->len > 0) { /* complete the pending line: it goes out with one prefix */
            const char *nl = memchr(p, '\n', (size_t)r);
            run_keep_partial(st, p, (size_t)(nl - p) + 1);
            run_emit_lines(rank, st->out_fd, st->buf, st->len);
            st->len = 0;
            p = nl + 1;
        }
        if (p <= last)
            run_emit_lines(rank, st->out_fd, p, (size_t)(last - p) + 1);
        p = last + 1;
    }
    if (p < end)
        run_keep_partial(st, p, (size_t)(end - p));
    if (st->len >= RUN_LINE_MAX)
        run_flush_partial(rank, st);
    return 1;
}

/* What a rank's exit did to its pipes is already there: read it before saying the rank died,
 * so its last words come before the launcher's message. Bounded: a child the rank left behind
 * may still be writing. */
static void run_drain_rank(int rank)
{
    for (int s = 0; s < 2; s++) {
        struct run_stream *st = &run.ranks[rank].st[s];
        for (int i = 0; i < 64 && st->fd >= 0 && run_read_stream(rank, st); i++)
            ;
    }
}

/* To every rank still there, and to the job's group for what the ranks started. */
static void run_signal_ranks(int sig)
{
    for (int i = 0; i < run.started; i++)
        if (run.ranks[i].pid > 0)
            kill(run.ranks[i].pid, sig);
    if (run.pgid > 0)
        kill(-run.pgid, sig);
}

static void run_begin_stop(int sig)
{
    run_signal_ranks(sig);
    if (sig != SIGKILL)
        run_signal_ranks(SIGCONT); /* a stopped rank would not act on SIGTERM */
    run.stopping = sig == SIGKILL ? RUN_KILL_SENT : RUN_TERM_SENT;
    run.term_at_ms = run_now_ms();
}

/* The ranks still running, as "1, 3" (shortened past a few dozen). */
static void run_live_list(char *buf, size_t len)
{
    size_t n = 0;
    buf[0] = '\0';
    for (int i = 0; i < run.started && n + 16 < len; i++)
        if (run.ranks[i].pid > 0)
            n += (size_t)snprintf(buf + n, len - n, "%s%d", n ? ", " : "", i);
    if (n + 16 >= len)
        snprintf(buf + n, len - n, ", ...");
}

/* One gdb attached to a rank, printing every thread's backtrace into `fd`. */
static pid_t run_spawn_gdb(pid_t rank_pid, int fd)
{
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (devnull < 0 || dup2(devnull, 0) < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0)
        _exit(RUN_EXIT_LAUNCH);
    sigaction(SIGPIPE, &run.orig_pipe, NULL);
    sigprocmask(SIG_SETMASK, &run.orig_mask, NULL);
    setrlimit(RLIMIT_NOFILE, &run.orig_nofile);
    char target[16];
    snprintf(target, sizeof target, "%d", (int)rank_pid);
    execlp("gdb", "gdb", "-batch", "-nx", "-p", target, "-ex", "thread apply all bt", (char *)NULL);
    _exit(127);
}

/* --stacks, at the timeout: what every running rank is doing, before it is stopped. One gdb
 * per rank, side by side (loading a large program's symbols takes seconds), each writing into
 * a memfd that is relayed afterwards like the rank's own lines; RUN_STACKS_S in all, then
 * the gdbs left are killed (their ranks are detached by the kernel). The rank pipes wait
 * meanwhile: the ranks are about to be stopped anyway. */
static void run_dump_stacks(void)
{
    char why[64];
    if (run_check_program("gdb", why, sizeof why) != 0) {
        run_msg("--stacks: cannot print the ranks' stacks: gdb: %s", why);
        return;
    }
    pid_t *gdb = calloc((size_t)run.started, sizeof *gdb);
    int *fd = calloc((size_t)run.started, sizeof *fd);
    if (!gdb || !fd)
        run_oom();
    int pending = 0;
    for (int i = 0; i < run.started; i++) {
        fd[i] = -1;
        if (run.ranks[i].pid <= 0)
            continue;
        fd[i] = memfd_create("ringcc-run-stacks", MFD_CLOEXEC);
        if (fd[i] < 0 || (gdb[i] = run_spawn_gdb(run.ranks[i].pid, fd[i])) < 0) {
            run_msg("--stacks: rank %d: %s", i, strerror(errno));
            if (fd[i] >= 0)
                close(fd[i]);
            fd[i] = -1, gdb[i] = 0;
            continue;
        }
        pending++;
    }
    int64_t deadline = run_now_ms() + RUN_STACKS_S * 1000;
    while (pending > 0) {
        int late = run_now_ms() >= deadline;
        for (int i = 0; i < run.started; i++) {
            if (gdb[i] <= 0)
                continue;
            if (late)
                kill(gdb[i], SIGKILL);
            if (waitpid(gdb[i], NULL, late ? 0 : WNOHANG) == gdb[i]) {
                gdb[i] = late ? -1 : 0; /* -1: cut short */
                pending--;
            }
        }
        if (pending > 0)
            poll(NULL, 0, 20);
    }
    for (int i = 0; i < run.started; i++) {
        if (fd[i] < 0)
            continue;
        char cut[32] = "";
        if (gdb[i] < 0)
            snprintf(cut, sizeof cut, ", stopped after %d s", RUN_STACKS_S);
        run_msg("rank %d (pid %d): its threads' stacks (gdb%s):", i, (int)run.ranks[i].pid, cut);
        off_t size = lseek(fd[i], 0, SEEK_END);
        char *text = size > 0 ? malloc((size_t)size + 1) : NULL;
        if (text && pread(fd[i], text, (size_t)size, 0) == (ssize_t)size) {
            size_t n = (size_t)size;
            if (text[n - 1] != '\n')
                text[n++] = '\n';
            run_emit_lines(i, 2, text, n);
        }
        free(text);
        close(fd[i]);
    }
    free(gdb);
    free(fd);
}

static int run_status_code(int status)
{
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    if (WIFSIGNALED(status))
        return 128 + WTERMSIG(status);
    return RUN_EXIT_LAUNCH;
}

static void run_describe(int status, char *buf, size_t len)
{
    if (WIFEXITED(status))
        snprintf(buf, len, "exited with status %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(buf, len, "was killed by signal %d (%s)%s", WTERMSIG(status),
                 strsignal(WTERMSIG(status)), WCOREDUMP(status) ? ", core dumped" : "");
    else
        snprintf(buf, len, "ended with wait status 0x%x", status);
}

static void run_reap(void)
{
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        int rank = -1;
        for (int i = 0; i < run.started; i++)
            if (run.ranks[i].pid == pid) {
                rank = i;
                break;
            }
        if (rank < 0)
            continue; /* not ours */
        run.ranks[rank].pid = 0;
        run.live--;
        run_drain_rank(rank);
        int failed = !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        char how[160];
        run_describe(status, how, sizeof how);
        if (failed && run.stopping == RUN_RUNNING && run.exit_code < 0) {
            run.exit_code = run_status_code(status);
            if (run.live > 0) {
                run_msg("rank %d (pid %d) %s; stopping the other ranks", rank, (int)pid, how);
                run_begin_stop(SIGTERM);
            } else {
                run_msg("rank %d (pid %d) %s", rank, (int)pid, how);
            }
        } else if (run.verbose) {
            run_msg("rank %d (pid %d) %s", rank, (int)pid, how);
        }
    }
}

static const char *run_signame(int sig)
{
    switch (sig) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGHUP: return "SIGHUP";
    case SIGQUIT: return "SIGQUIT";
    default: return strsignal(sig);
    }
}

static void run_on_signal(int sig)
{
    if (run.stopping == RUN_RUNNING) {
        if (run.exit_code < 0) {
            run.reraise_sig = sig;
            run.exit_code = 128 + sig;
        }
        if (run.verbose || sig != SIGINT) /* Ctrl-C explains itself */
            run_msg("received %s; forwarding it to the ranks", run_signame(sig));
        run_begin_stop(sig);
    } else if (run.stopping == RUN_TERM_SENT) {
        run_msg("received %s while stopping the ranks; killing them", run_signame(sig));
        run_begin_stop(SIGKILL);
    }
}

static void run_read_signals(void)
{
    struct signalfd_siginfo si;
    int child = 0;
    while (read(run.sfd, &si, sizeof si) == (ssize_t)sizeof si) {
        if (si.ssi_signo == SIGCHLD)
            child = 1;
        else
            run_on_signal((int)si.ssi_signo);
    }
    if (child)
        run_reap();
}

static int run_open_streams(void)
{
    int n = 0;
    for (int i = 0; i < run.started; i++)
        n += (run.ranks[i].st[0].fd >= 0) + (run.ranks[i].st[1].fd >= 0);
    return n;
}

static void run_loop(int64_t start_ms)
{
    size_t maxfds = (size_t)run.started * 2 + 1;
    struct pollfd *pfd = calloc(maxfds, sizeof *pfd);
    int *owner = calloc(maxfds, sizeof *owner); /* rank*2 + stream */
    if (!pfd || !owner)
        run_oom();
    int64_t deadline = run.timeout_s > 0 ? start_ms + (int64_t)(run.timeout_s * 1000.0) : -1;
    int64_t drain_until = -1;
    int final_kill_done = 0;

    for (;;) {
        int64_t now = run_now_ms();
        if (run.live == 0) {
            if (!final_kill_done) {
                /* Everything left in the group is an orphan of a finished job. */
                if (run.pgid > 0 && kill(-run.pgid, 0) == 0) {
                    if (run.verbose)
                        run_msg("killing what the ranks left running in their process group");
                    kill(-run.pgid, SIGKILL);
                }
                final_kill_done = 1;
                drain_until = now + RUN_DRAIN_MS;
            }
            /* A writer outside the group (setsid) may hold a pipe open: do not wait forever. */
            if (run_open_streams() == 0 || now >= drain_until)
                break;
        }
        if (deadline >= 0 && now >= deadline && run.stopping == RUN_RUNNING && run.live > 0) {
            char live[128];
            run_live_list(live, sizeof live);
            run_msg("timed out after %g s; stopping the ranks (still running: %s)", run.timeout_s,
                    live);
            if (run.exit_code < 0)
                run.exit_code = RUN_EXIT_TIMEOUT;
            if (run.stacks)
                run_dump_stacks();
            run_begin_stop(SIGTERM);
        }
        if (run.stopping == RUN_TERM_SENT && run.live > 0 && now >= run.term_at_ms + RUN_GRACE_MS) {
            run_msg("%d rank%s still running %d s after SIGTERM; sending SIGKILL", run.live,
                    run.live == 1 ? "" : "s", RUN_GRACE_MS / 1000);
            run_begin_stop(SIGKILL);
        }
        if (run.stopping == RUN_KILL_SENT && run.live > 0 &&
            now >= run.term_at_ms + RUN_GIVEUP_MS) {
            run_msg("%d rank%s did not die of SIGKILL; giving up on them", run.live,
                    run.live == 1 ? "" : "s");
            break;
        }

        /* Sleep until the nearest deadline. */
        int64_t wake = -1;
        if (deadline >= 0 && run.stopping == RUN_RUNNING && run.live > 0)
            wake = deadline;
        if (run.stopping == RUN_TERM_SENT && run.live > 0)
            wake = run.term_at_ms + RUN_GRACE_MS;
        if (run.stopping == RUN_KILL_SENT && run.live > 0)
            wake = run.term_at_ms + RUN_GIVEUP_MS;
        if (run.live == 0)
            wake = drain_until;
        int timeout_ms = -1;
        if (wake >= 0)
            timeout_ms = wake > now ? (int)(wake - now < INT_MAX ? wake - now : INT_MAX) : 0;

        nfds_t n = 0;
        pfd[n].fd = run.sfd;
        pfd[n].events = POLLIN;
        owner[n++] = -1;
        for (int i = 0; i < run.started; i++)
            for (int s = 0; s < 2; s++)
                if (run.ranks[i].st[s].fd >= 0) {
                    pfd[n].fd = run.ranks[i].st[s].fd;
                    pfd[n].events = POLLIN;
                    owner[n++] = i * 2 + s;
                }
        int rc = poll(pfd, n, timeout_ms);
        if (rc < 0) {
            if (errno == EINTR)
                continue;
            run_msg("poll: %s", strerror(errno));
            if (run.exit_code < 0)
                run.exit_code = RUN_EXIT_LAUNCH;
            run_begin_stop(SIGKILL);
            break;
        }
        /* Output first, so a rank's last lines precede the message about its exit. */
        for (nfds_t k = 1; k < n; k++)
            if (pfd[k].revents) {
                int rank = owner[k] / 2;
                struct run_stream *st = &run.ranks[rank].st[owner[k] % 2];
                if (st->fd >= 0)
                    run_read_stream(rank, st);
            }
        if (pfd[0].revents)
            run_read_signals();
    }
    free(pfd);
    free(owner);
}

int main(int argc, char **argv)
{
    run_ensure_std_fds();
    run_parse_args(argc, argv);

    char why[128];
    int rc = run_check_program(run.argv[0], why, sizeof why);
    if (rc) {
        run_msg("%s: %s", run.argv[0], why);
        return rc;
    }
    run.ranks = calloc((size_t)run.nranks, sizeof *run.ranks);
    if (!run.ranks)
        run_oom();
    run_raise_nofile();
    run_setup_env();
    run_setup_signals();

    /* Like mpirun: rank 0 gets the launcher's stdin unless it is a terminal (a rank in a
     * background process group reading the terminal would be stopped by SIGTTIN). */
    int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (devnull < 0) {
        run_msg("/dev/null: %s", strerror(errno));
        return RUN_EXIT_LAUNCH;
    }
    if (run.verbose)
        run_msg("starting %d rank%s of %s; RCC_ROOT=%s", run.nranks, run.nranks == 1 ? "" : "s",
                run.argv[0], getenv("RCC_ROOT"));

    int64_t start_ms = run_now_ms();
    for (int i = 0; i < run.nranks; i++) {
        int in_fd = (i == 0 && !isatty(0)) ? 0 : devnull;
        if (run_spawn(i, in_fd) != 0) {
            run_msg("cannot start rank %d: %s; stopping the ranks already started", i,
                    strerror(errno));
            run.exit_code = RUN_EXIT_LAUNCH;
            run_begin_stop(SIGTERM);
            break;
        }
        if (run.verbose)
            run_msg("rank %d is pid %d", i, (int)run.ranks[i].pid);
    }
    close(devnull);

    run_loop(start_ms);

    for (int i = 0; i < run.started; i++)
        for (int s = 0; s < 2; s++)
            if (run.ranks[i].st[s].fd >= 0)
                run_close_stream(i, &run.ranks[i].st[s]);

    if (run.reraise_sig && run.exit_code == 128 + run.reraise_sig) {
        /* End by the same signal, so a calling shell sees an interrupted job (and stops a
         * script on Ctrl-C) rather than an ordinary exit status. */
        signal(run.reraise_sig, SIG_DFL);
        sigset_t one;
        sigemptyset(&one);
        sigaddset(&one, run.reraise_sig);
        sigprocmask(SIG_UNBLOCK, &one, NULL);
        raise(run.reraise_sig);
    }
    return run.exit_code < 0 ? 0 : run.exit_code;
}
