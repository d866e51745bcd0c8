/*
 * linkemu.c — a lossy, slow Ethernet cable between two network namespaces, in user space: what
 * `tc qdisc ... netem delay D J loss P` does, for kernels built without sch_netem (such as the
 * CI machines of this project, which have no netem, fq or tc classifiers).
 *
 *   linkemu HOST_NS HOST_IF SWITCH_NS SWITCH_IF DELAY_MS JITTER_MS LOSS_PERCENT [SEED]
 *
 * Both interfaces must exist already as persistent TAP devices (`ip -n NS tuntap add dev IF
 * mode tap`); linkemu enters each namespace (setns), attaches to its TAP, and forwards every
 * Ethernet frame from one to the other: each frame is dropped with probability LOSS_PERCENT/100,
 * else delivered DELAY_MS + uniform(-JITTER_MS, +JITTER_MS) later (frames may overtake each other,
 * as with netem's jitter). Both directions are impaired, as netem on both ends of a veth would.
 * At most 4096 frames wait per direction (netem's default limit is 1000); beyond that, frames are
 * dropped. SIGTERM/SIGINT stop it; it then prints how many frames it forwarded and dropped.
 *
 * Single-threaded: one poll() loop over the two TAP fds with the earliest due frame as timeout.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#define MAX_FRAME 65536
#define MAX_QUEUED 4096

typedef struct frame_t {
  double due_ms;
  size_t len;
  unsigned char *data;
} frame_t;

/* Frames waiting for one direction, kept as a binary min-heap on due time. */
typedef struct queue_t {
  frame_t heap[MAX_QUEUED];
  size_t n;
  unsigned long forwarded, lost, overflow;
} queue_t;

static volatile sig_atomic_t g_stop = 0;
static void on_signal(int sig) { g_stop = sig; }

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void die(const char *what) {
  fprintf(stderr, "linkemu: %s: %s\n", what, strerror(errno));
  exit(1);
}

/* Enters namespace `ns` and attaches to its persistent TAP device `ifname`. */
static int open_tap(const char *ns, const char *ifname) {
  char path[256];
  snprintf(path, sizeof path, "/var/run/netns/%s", ns);
  int nsfd = open(path, O_RDONLY | O_CLOEXEC);
  if (nsfd < 0) die(path);
  if (setns(nsfd, CLONE_NEWNET) != 0) die("setns");
  close(nsfd);
  int fd = open("/dev/net/tun", O_RDWR | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) die("/dev/net/tun");
  struct ifreq ifr;
  memset(&ifr, 0, sizeof ifr);
  ifr.ifr_flags = IFF_TAP | IFF_NO_PI;
  snprintf(ifr.ifr_name, IFNAMSIZ, "%s", ifname);
  if (ioctl(fd, TUNSETIFF, &ifr) != 0) die("TUNSETIFF (is it a persistent tap device?)");
  return fd;
}

static void heap_push(queue_t *q, frame_t f) {
  size_t i = q->n++;
  q->heap[i] = f;
  while (i > 0 && q->heap[(i - 1) / 2].due_ms > q->heap[i].due_ms) {
    frame_t t = q->heap[i];
    q->heap[i] = q->heap[(i - 1) / 2];
    q->heap[(i - 1) / 2] = t;
    i = (i - 1) / 2;
  }
}

static frame_t heap_pop(queue_t *q) {
  frame_t top = q->heap[0];
  q->heap[0] = q->heap[--q->n];
  for (size_t i = 0;;) {
    size_t l = 2 * i + 1, r = l + 1, m = i;
    if (l < q->n && q->heap[l].due_ms < q->heap[m].due_ms) m = l;
    if (r < q->n && q->heap[r].due_ms < q->heap[m].due_ms) m = r;
    if (m == i) break;
    frame_t t = q->heap[i];
    q->heap[i] = q->heap[m];
    q->heap[m] = t;
    i = m;
  }
  return top;
}

/* xorshift64*: deterministic per seed, good enough for drop and jitter decisions. */
static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static double uniform01(void) {
  g_rng ^= g_rng >> 12;
  g_rng ^= g_rng << 25;
  g_rng ^= g_rng >> 27;
  return (double)((g_rng * 2685821657736338717ull) >> 11) / 9007199254740992.0;
}

/* Reads every frame waiting on fd into q (or drops it). */
static void take_frames(int fd, queue_t *q, double delay, double jitter, double loss) {
  static unsigned char buf[MAX_FRAME];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0) return;
    if (uniform01() < loss) {
      q->lost++;
      continue;
    }
    if (q->n == MAX_QUEUED) {
      q->overflow++;
      continue;
    }
    frame_t f;
    f.due_ms = now_ms() + delay + (2.0 * uniform01() - 1.0) * jitter;
    f.len = (size_t)n;
    f.data = malloc((size_t)n);
    if (f.data == NULL) die("malloc");
    memcpy(f.data, buf, (size_t)n);
    heap_push(q, f);
  }
}

/* Writes every due frame of q to fd. */
static void deliver(int fd, queue_t *q) {
  double t = now_ms();
  while (q->n > 0 && q->heap[0].due_ms <= t) {
    frame_t f = heap_pop(q);
    if (write(fd, f.data, f.len) == (ssize_t)f.len) q->forwarded++;
    else q->lost++; /* the kernel refused it (interface down): as lost as a dropped frame */
    free(f.data);
  }
}

int main(int argc, char **argv) {
  if (argc < 8) {
    fprintf(stderr, "usage: linkemu HOST_NS HOST_IF SWITCH_NS SWITCH_IF DELAY_MS JITTER_MS LOSS_PERCENT [SEED]\n");
    return 2;
  }
  double delay = atof(argv[5]), jitter = atof(argv[6]), loss = atof(argv[7]) / 100.0;
  if (argc > 8) g_rng ^= strtoull(argv[8], NULL, 10) * 0x2545F4914F6CDD1Dull;
  if (jitter > delay) jitter = delay;
  int host = open_tap(argv[1], argv[2]);
  int sw = open_tap(argv[3], argv[4]);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  static queue_t up, down; /* up: host -> switch; down: switch -> host */
  printf("linkemu: %s/%s <-> %s/%s: delay %.0f ms +- %.0f ms, loss %.2f%%\n", argv[1], argv[2], argv[3], argv[4], delay,
         jitter, loss * 100.0);
  fflush(stdout);
  while (!g_stop) {
    double next = 1e18;
    if (up.n > 0) next = up.heap[0].due_ms;
    if (down.n > 0 && down.heap[0].due_ms < next) next = down.heap[0].due_ms;
    double wait = next - now_ms();
    int timeout = next >= 1e17 ? 200 : wait <= 0 ? 0 : (int)wait + 1;
    struct pollfd fds[2] = {{host, POLLIN, 0}, {sw, POLLIN, 0}};
    if (poll(fds, 2, timeout) < 0 && errno != EINTR) die("poll");
    if (fds[0].revents & POLLIN) take_frames(host, &up, delay, jitter, loss);
    if (fds[1].revents & POLLIN) take_frames(sw, &down, delay, jitter, loss);
    deliver(sw, &up);
    deliver(host, &down);
  }
  printf("linkemu: stopped: host->switch %lu forwarded, %lu lost, %lu over the limit; switch->host %lu forwarded, "
         "%lu lost, %lu over the limit\n",
         up.forwarded, up.lost, up.overflow, down.forwarded, down.lost, down.overflow);
  return 0;
}
