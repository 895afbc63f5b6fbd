/* The host inventory of ringcc-info (hostinv.h). */
#include "hostinv.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

/* dir/leaf into buf; 0 when it does not fit. */
static int inv_path(char *buf, size_t size, const char *dir, const char *leaf)
{
    int n = snprintf(buf, size, "%s/%s", dir, leaf);
    return n > 0 && (size_t)n < size;
}

/* The first line of a small sysfs/procfs file, without its newline; 0 when unreadable. */
static int inv_read_line(const char *path, char *buf, size_t size)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    int ok = fgets(buf, (int)size, f) != NULL;
    fclose(f);
    if (ok)
        buf[strcspn(buf, "\n")] = '\0';
    return ok;
}

static int inv_prefix_len(const struct sockaddr *mask)
{
    const unsigned char *b = NULL;
    size_t n = 0;
    if (mask && mask->sa_family == AF_INET)
        b = (const unsigned char *)&((const struct sockaddr_in *)mask)->sin_addr, n = 4;
    else if (mask && mask->sa_family == AF_INET6)
        b = ((const struct sockaddr_in6 *)mask)->sin6_addr.s6_addr, n = 16;
    int bits = 0;
    for (size_t i = 0; i < n; i++)
        bits += __builtin_popcount(b[i]);
    return bits;
}

static void inv_print_addrs(FILE *out, const struct ifaddrs *list, const char *name)
{
    for (const struct ifaddrs *a = list; a; a = a->ifa_next) {
        if (!a->ifa_addr || strcmp(a->ifa_name, name) != 0)
            continue;
        int fam = a->ifa_addr->sa_family;
        if (fam != AF_INET && fam != AF_INET6)
            continue;
        const void *src =
            fam == AF_INET ? (const void *)&((const struct sockaddr_in *)a->ifa_addr)->sin_addr
                           : (const void *)&((const struct sockaddr_in6 *)a->ifa_addr)->sin6_addr;
        char text[INET6_ADDRSTRLEN];
        if (inet_ntop(fam, src, text, sizeof text))
            fprintf(out, "  %s/%d", text, inv_prefix_len(a->ifa_netmask));
    }
}

void hostinv_print_interfaces(FILE *out)
{
    struct ifaddrs *list;
    if (getifaddrs(&list) != 0) {
        fprintf(out, "  (getifaddrs failed)\n");
        return;
    }
    /* getifaddrs lists an interface once per address: print each name once, in order. */
    for (const struct ifaddrs *a = list; a; a = a->ifa_next) {
        const struct ifaddrs *first = list;
        while (strcmp(first->ifa_name, a->ifa_name) != 0)
            first = first->ifa_next;
        if (first != a)
            continue;
        char path[128], mtu[32] = "?", speed[32] = "";
        snprintf(path, sizeof path, "/sys/class/net/%s/mtu", a->ifa_name);
        inv_read_line(path, mtu, sizeof mtu);
        snprintf(path, sizeof path, "/sys/class/net/%s/speed", a->ifa_name);
        /* Virtual links report -1 or refuse the read: no speed to state. */
        if (!inv_read_line(path, speed, sizeof speed) || atoi(speed) <= 0)
            snprintf(speed, sizeof speed, "speed unknown");
        else
            strncat(speed, " Mbit/s", sizeof speed - strlen(speed) - 1);
        fprintf(out, "  %-10s %-4s%s  mtu %-5s  %-14s", a->ifa_name,
                a->ifa_flags & IFF_UP ? "up" : "down",
                a->ifa_flags & IFF_LOOPBACK ? " (loopback)" : "", mtu, speed);
        inv_print_addrs(out, list, a->ifa_name);
        fputc('\n', out);
    }
    freeifaddrs(list);
}

/* Calls visit(dir/name) for each entry of dir, skipping dot files; returns how many. */
static int inv_each_entry(const char *dir, void (*visit)(FILE *, const char *), FILE *out)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.')
            continue;
        char path[1024];
        if (inv_path(path, sizeof path, dir, e->d_name))
            visit(out, path);
        n++;
    }
    closedir(d);
    return n;
}

static void inv_gpu(FILE *out, const char *dir)
{
    char path[1100], line[256], model[128] = "?";
    FILE *f = inv_path(path, sizeof path, dir, "information") ? fopen(path, "r") : NULL;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "Model:", 6)) {
            const char *m = line + 6 + strspn(line + 6, " \t");
            size_t len = strcspn(m, "\n");
            len = len < sizeof model - 1 ? len : sizeof model - 1;
            memcpy(model, m, len);
            model[len] = '\0';
        }
    if (f)
        fclose(f);
    fprintf(out, "  %s  %s\n", strrchr(dir, '/') + 1, model);
}

void hostinv_print_gpus(FILE *out)
{
    if (!inv_each_entry("/proc/driver/nvidia/gpus", inv_gpu, out))
        fprintf(out, "  none (no NVIDIA driver: /proc/driver/nvidia/gpus is absent or empty)\n");
}

static void inv_rdma_port(FILE *out, const char *port_dir)
{
    char path[1024], state[64] = "?", rate[64] = "?", layer[32] = "?";
    if (inv_path(path, sizeof path, port_dir, "state"))
        inv_read_line(path, state, sizeof state);
    if (inv_path(path, sizeof path, port_dir, "rate"))
        inv_read_line(path, rate, sizeof rate);
    if (inv_path(path, sizeof path, port_dir, "link_layer"))
        inv_read_line(path, layer, sizeof layer);
    fprintf(out, "    port %s: %s, %s, %s\n", strrchr(port_dir, '/') + 1, state, rate, layer);
}

static void inv_rdma(FILE *out, const char *dev_dir)
{
    fprintf(out, "  %s\n", strrchr(dev_dir, '/') + 1);
    char ports[1024];
    if (inv_path(ports, sizeof ports, dev_dir, "ports"))
        inv_each_entry(ports, inv_rdma_port, out);
}

void hostinv_print_rdma(FILE *out)
{
    if (!inv_each_entry("/sys/class/infiniband", inv_rdma, out))
        fprintf(out, "  none (/sys/class/infiniband is absent or empty: no RDMA driver loaded)\n");
}
