/* What a wake-up costs on this machine: a futex ping-pong between two processes.
 *
 *   gcc -O2 benches/wake_cost.c -o /tmp/wake_cost
 *   /tmp/wake_cost CPU_A CPU_B BUSY      # prints the median round trip in microseconds
 *
 * Process A (pinned to CPU_A) and process B (pinned to CPU_B) take turns on a
 * shared futex word: each wakes the other and parks until woken back, so a
 * round trip is two wake-ups of a parked process, the hop a parked monitor or
 * endpoint pays.  BUSY 1 adds a process that never blocks on each CPU (as a
 * CPU-bound flood's sender and receiver do), so a wake-up must preempt it.
 * bench_fairness.py prints these beside the flooded ping-pong: a ping-pong
 * over two monitors on two CPUs whose monitors cannot poll (the flood leaves
 * them no idle time) pays two cross-CPU wake-ups per round trip at least.
 */
#define _GNU_SOURCE
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define ROUNDS 20000

static void pin(int cpu) {
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    sched_setaffinity(0, sizeof s, &s);
}

static long futex(atomic_int *w, int op, int v) { return syscall(SYS_futex, w, op, v, 0, 0, 0); }

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static pid_t hog(int cpu) {
    pid_t p = fork();
    if (p == 0) {
        pin(cpu);
        for (volatile unsigned long x = 0;; x++) {
        }
    }
    return p;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s CPU_A CPU_B BUSY\n", argv[0]);
        return 2;
    }
    int a = atoi(argv[1]), b = atoi(argv[2]), busy = atoi(argv[3]);
    atomic_int *w = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    static double rt[ROUNDS];
    pid_t hogs[2] = {0, 0};
    if (busy) {
        hogs[0] = hog(a);
        hogs[1] = a == b ? 0 : hog(b);
        usleep(200000); /* let them settle on their CPUs */
    }
    atomic_store(w, 0);
    pid_t peer = fork();
    if (peer == 0) { /* B: answers each odd value with the next even one */
        pin(b);
        for (int i = 0; i < ROUNDS; i++) {
            while (atomic_load(w) != 2 * i + 1) futex(w, FUTEX_WAIT, 2 * i);
            atomic_store(w, 2 * i + 2);
            futex(w, FUTEX_WAKE, 1);
        }
        _exit(0);
    }
    pin(a);
    for (int i = 0; i < ROUNDS; i++) {
        double t0 = now_us();
        atomic_store(w, 2 * i + 1);
        futex(w, FUTEX_WAKE, 1);
        while (atomic_load(w) != 2 * i + 2) futex(w, FUTEX_WAIT, 2 * i + 1);
        rt[i] = now_us() - t0;
    }
    waitpid(peer, 0, 0);
    for (int i = 0; i < 2; i++) {
        if (hogs[i] > 0) {
            kill(hogs[i], SIGKILL);
            waitpid(hogs[i], 0, 0);
        }
    }
    qsort(rt, ROUNDS, sizeof rt[0], cmp);
    printf("%.2f\n", rt[ROUNDS / 2]);
    return 0;
}
