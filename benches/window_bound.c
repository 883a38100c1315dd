/* The best one-way throughput a credit window allows on this machine: a model.
 *
 * The multi-hop path of benches/bench_multihop.py (client on core 0, service
 * on core 1) is four processes on two CPUs: the client and monitor 0 share
 * CPU 0, monitor 1 and the service share CPU 1.  This program runs the same
 * pipeline with nothing but the scheduling in it: counters instead of rings,
 * no copies, no Python.  The monitors poll at SCHED_IDLE (as ours do while
 * traffic flows), the ends park on a futex when they must wait (as ours do),
 * the sender may have WINDOW messages unacknowledged, and the receiver
 * acknowledges every WINDOW/2 (TN-006 2.10).  WORK_NS of busy work per
 * message at each end stands for the caller's own per-message cost.
 *
 *   gcc -O2 benches/window_bound.c -o /tmp/window_bound
 *   /tmp/window_bound WINDOW WORK_NS BATCH [HOLD]   # BATCH 1: send/receive all that fits at once
 *
 * HOLD 1 models a sender that holds what finds no credit (core-rs/dispatcher/src/multihop/held.rs):
 * credits count frames; a message sent while the window is used up joins the
 * held frames (up to four of 64 messages), which go first, a credit each, as
 * credits come back; the receiver does its per-message work for every message
 * of a frame and acknowledges frames.  HOLD 0 (the default) is one message a frame.
 *
 * Prints messages per second.  Whatever the runtime does, it cannot beat
 * this figure for the same window: each window's worth of frames needs the
 * context switches this model pays.
 */
#define _GNU_SOURCE
#include <linux/futex.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Shared counters, each on its own cache line (64 longs apart = 512 bytes). */
static atomic_long *shared;
#define SENT (shared[0])      /* written by the client */
#define FWD0 (shared[64])     /* monitor 0 -> monitor 1 */
#define FWD1 (shared[128])    /* monitor 1 -> service */
#define ACKED_S (shared[192]) /* service's acks */
#define ACKED_1 (shared[256]) /* monitor 1 -> monitor 0 */
#define ACKED_0 (shared[320]) /* monitor 0 -> client */
#define BELL(i) ((atomic_int *)&shared[384 + 64 * (i)])   /* futex words: 0 client, 1 service */
#define WAITERS(i) ((atomic_int *)&shared[416 + 64 * (i)])
#define DONE (shared[512])    /* set by the client once everything is acknowledged */

static long n_messages = 2000000;
static long window = 16;
static double work_ns;

/* Counters count frames; each frame's message count goes here (written by the
 * client before it publishes the frame, read by the service after it sees it). */
#define RING 8192
#define FRAME_MAX 64           /* messages a held frame packs (wire.rs MAX_BATCH_MESSAGES) */
#define HOLD_MAX (4 * FRAME_MAX) /* four held frames (held.rs HELD_FRAMES) */
static int *frame_size;

static void pin(int cpu) {
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    sched_setaffinity(0, sizeof s, &s);
}

static void idle_policy(void) {
    struct sched_param p = {0};
    sched_setscheduler(0, SCHED_IDLE, &p);
}

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

static void busy(double ns) {
    if (ns <= 0) return;
    double until = now_ns() + ns;
    while (now_ns() < until) {
    }
}

/* Event-count doorbell, as core-rs/base/src/park.rs. */
static void ring(int i) {
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load(WAITERS(i))) {
        atomic_fetch_add(BELL(i), 1);
        syscall(SYS_futex, BELL(i), FUTEX_WAKE, 1, 0, 0, 0);
    }
}

static void park(int i, int (*ready)(void)) {
    atomic_fetch_add(WAITERS(i), 1);
    int seen = atomic_load(BELL(i));
    if (!ready()) syscall(SYS_futex, BELL(i), FUTEX_WAIT, seen, 0, 0, 0);
    atomic_fetch_sub(WAITERS(i), 1);
}

static long client_sent;
static int client_may_send(void) { return client_sent - atomic_load(&ACKED_0) < window; }
static long service_seen;
static int service_has_data(void) { return atomic_load(&FWD1) > service_seen; }

static void monitor(int cpu, atomic_long *in, atomic_long *out, atomic_long *ack_in, atomic_long *ack_out, int wake) {
    pin(cpu);
    idle_policy();
    long fwd = 0, acked = 0;
    for (;;) {
        long s = atomic_load(in);
        if (s > fwd) {
            fwd = s;
            atomic_store(out, fwd);
            if (wake == 1) ring(1);
        }
        long a = atomic_load(ack_in);
        if (a > acked) {
            acked = a;
            atomic_store(ack_out, acked);
            if (wake == 0) ring(0);
        }
        if (atomic_load(&DONE)) _exit(0);
    }
}

int main(int argc, char **argv) {
    if (argc != 4 && argc != 5) {
        fprintf(stderr, "usage: %s WINDOW WORK_NS BATCH [HOLD]\n", argv[0]);
        return 2;
    }
    window = atol(argv[1]);
    work_ns = atof(argv[2]);
    int batch = atoi(argv[3]);
    int hold = argc == 5 ? atoi(argv[4]) : 0;
    shared = mmap(0, 8192 + RING * sizeof(int), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    frame_size = (int *)((char *)shared + 8192);
    if (!fork()) monitor(0, &SENT, &FWD0, &ACKED_1, &ACKED_0, 0);
    if (!fork()) monitor(1, &FWD0, &FWD1, &ACKED_S, &ACKED_1, 1);
    if (!fork()) { /* the service: works on every message of a frame, acknowledges frames */
        pin(1);
        long consumed = 0, acked = 0, done = 0;
        while (done < n_messages) {
            long avail = atomic_load(&FWD1);
            if (avail == consumed) {
                service_seen = consumed;
                park(1, service_has_data);
                continue;
            }
            long take = batch ? avail - consumed : 1;
            for (long i = 0; i < take; i++) {
                int k = frame_size[consumed % RING];
                for (int j = 0; j < k; j++) busy(work_ns);
                done += k;
                if (++consumed - acked >= window / 2) {
                    acked = consumed;
                    atomic_store(&ACKED_S, acked);
                }
            }
        }
        atomic_store(&ACKED_S, consumed);
        _exit(0);
    }
    pin(0); /* the client */
    double t0 = now_ns();
    long made = 0, held = 0;
    while (made < n_messages || held > 0) {
        long room = window - (client_sent - atomic_load(&ACKED_0));
        if (held > 0 && room > 0) { /* held frames go first, oldest first, a credit each */
            long k = held < FRAME_MAX ? held : FRAME_MAX;
            frame_size[client_sent % RING] = (int)k;
            held -= k;
            atomic_store(&SENT, ++client_sent);
            continue;
        }
        if (made == n_messages || (room <= 0 && (!hold || held == HOLD_MAX))) {
            park(0, client_may_send);
            continue;
        }
        if (room <= 0) { /* hold it for the next credit */
            busy(work_ns);
            made++;
            held++;
            continue;
        }
        long take = batch ? room : 1;
        if (take > n_messages - made) take = n_messages - made;
        for (long i = 0; i < take; i++) {
            busy(work_ns);
            frame_size[(client_sent + i) % RING] = 1;
        }
        made += take;
        client_sent += take;
        atomic_store(&SENT, client_sent);
    }
    while (atomic_load(&ACKED_0) < client_sent) {
    }
    atomic_store(&DONE, 1);
    double secs = (now_ns() - t0) / 1e9;
    while (wait(0) > 0) {
    }
    printf("%.0f\n", n_messages / secs);
    return 0;
}
