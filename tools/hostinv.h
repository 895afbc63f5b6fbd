/*
 * What this host offers a job, as ringcc-info prints it: network interfaces
 * with their addresses and link speeds, GPUs and RDMA devices. Read from
 * getifaddrs and sysfs/procfs only, so it works without any driver library.
 */
#ifndef RINGCC_HOSTINV_H
#define RINGCC_HOSTINV_H

#include <stdio.h>

/* One line per interface: "  eth0  up  mtu 1500  10000 Mbit/s  10.0.0.2/24 fe80::1/64". */
void hostinv_print_interfaces(FILE *out);
/* NVIDIA GPUs the kernel driver reports (/proc/driver/nvidia/gpus), or why none are listed. */
void hostinv_print_gpus(FILE *out);
/* RDMA devices (/sys/class/infiniband) with each port's state and rate, or why none are listed. */
void hostinv_print_rdma(FILE *out);

#endif /* RINGCC_HOSTINV_H */
