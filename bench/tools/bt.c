/* bt: small timing helper for bench/run.sh (kpackfs benchmark suite).
 *
 *   bt mount-wait PATH TIMEOUT_MS -- CMD ARGS...
 *       t0 = now; fork+exec CMD (stdout/stderr to /dev/null, or appended to
 *       $BT_LOG); poll stat(PATH) every 100 us until it succeeds; prints
 *       "usable_us=N pid=P" at once, then "exit_us=E status=S" when CMD
 *       exits. Stays (as child subreaper) until CMD and everything it
 *       started (a detached daemon) have exited, i.e. until unmounted.
 *   bt stat PATH            one stat(), prints "stat_us=N size=S"
 *   bt first-byte PATH      open()+read(1 byte), prints "open_us=N read_us=M total_us=T"
 *   bt read PATH [BYTES [BS [direct]]]
 *       sequential read() of BYTES (default: whole file) with BS-byte
 *       (default 1 MiB) buffers, like `dd bs=1M of=/dev/null`; prints
 *       "bytes=N secs=S mbps=M" (MB = 10^6 bytes). "direct" opens O_DIRECT.
 *   bt read-ranges PATH RANGES [AHEAD]
 *       reads the "offset size" ranges listed in file RANGES, in order, with
 *       1 MiB pread()s; with AHEAD > 0 it first advises the kernel
 *       (POSIX_FADV_WILLNEED) of the next AHEAD ranges; prints like read.
 *   bt runs N WARMUP CMD ARGS...
 *       runs CMD WARMUP times untimed, then N times timed (fork+exec+wait,
 *       stdout/stderr to /dev/null); prints one wall time in us per run;
 *       fails if any run exits non-zero.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void die(const char *m) { perror(m); exit(1); }

static pid_t spawn(char **argv) {
  pid_t p = fork();
  if (p < 0) die("fork");
  if (p == 0) {
    int fd = open("/dev/null", O_RDWR);
    if (fd >= 0) { dup2(fd, 0); dup2(fd, 1); dup2(fd, 2); if (fd > 2) close(fd); }
    const char *log = getenv("BT_LOG");
    if (log && *log) {
      int lf = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
      if (lf >= 0) { dup2(lf, 1); dup2(lf, 2); if (lf > 2) close(lf); }
    }
    execvp(argv[0], argv);
    _exit(127);
  }
  return p;
}

static int cmd_mount_wait(int argc, char **argv) {
  if (argc < 5) { fprintf(stderr, "usage: bt mount-wait PATH TIMEOUT_MS -- CMD...\n"); return 2; }
  const char *path = argv[2];
  int64_t timeout = atoll(argv[3]) * 1000000LL;
  int i = 4;
  if (strcmp(argv[i], "--")) { fprintf(stderr, "bt mount-wait: expected --\n"); return 2; }
  i++;
  /* Orphaned grandchildren (a detaching daemon) are reparented to us, so
   * everything this command starts is reaped here. */
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  struct stat st;
  int64_t t0 = now_ns();
  pid_t p = spawn(argv + i);
  int64_t usable = -1, exited = -1;
  int status = -1, s;
  struct timespec nap = {0, 100000};
  while (now_ns() - t0 < timeout) {
    if (exited < 0 && waitpid(p, &s, WNOHANG) == p) {
      exited = now_ns() - t0;
      status = WIFEXITED(s) ? WEXITSTATUS(s) : 128 + WTERMSIG(s);
    }
    if (stat(path, &st) == 0) { usable = now_ns() - t0; break; }
    if (exited >= 0 && status != 0) break;
    nanosleep(&nap, NULL);
  }
  printf("usable_us=%lld pid=%d\n", usable < 0 ? -1LL : (long long)(usable / 1000), (int)p);
  fflush(stdout);
  if (usable < 0) {
    if (exited < 0) kill(p, SIGTERM);
    fprintf(stderr, "bt mount-wait: %s never appeared (command status %d)\n", path, status);
  }
  if (exited >= 0) printf("exit_us=%lld status=%d\n", (long long)(exited / 1000), status);
  fflush(stdout);
  for (;;) {
    pid_t q = waitpid(-1, &s, 0);
    if (q < 0) { if (errno == EINTR) continue; break; }
    if (q == p) {
      printf("exit_us=%lld status=%d\n", (long long)((now_ns() - t0) / 1000), WIFEXITED(s) ? WEXITSTATUS(s) : 128 + WTERMSIG(s));
      fflush(stdout);
    }
  }
  return usable >= 0 ? 0 : 1;
}

static int cmd_stat(const char *path) {
  struct stat st;
  int64_t t0 = now_ns();
  int r = stat(path, &st);
  int64_t t1 = now_ns();
  if (r) die(path);
  printf("stat_us=%.1f size=%lld\n", (t1 - t0) / 1000.0, (long long)st.st_size);
  return 0;
}

static int cmd_first_byte(const char *path) {
  char c;
  int64_t t0 = now_ns();
  int fd = open(path, O_RDONLY);
  int64_t t1 = now_ns();
  if (fd < 0) die(path);
  ssize_t n = read(fd, &c, 1);
  int64_t t2 = now_ns();
  if (n != 1) die("read");
  close(fd);
  printf("open_us=%.1f read_us=%.1f total_us=%.1f\n", (t1 - t0) / 1000.0, (t2 - t1) / 1000.0, (t2 - t0) / 1000.0);
  return 0;
}

static int cmd_read(int argc, char **argv) {
  const char *path = argv[2];
  long long want = argc > 3 ? atoll(argv[3]) : -1;
  size_t bs = argc > 4 ? (size_t)atoll(argv[4]) : (1 << 20);
  int direct = argc > 5 && !strcmp(argv[5], "direct");
  void *buf;
  if (posix_memalign(&buf, 4096, bs)) die("posix_memalign");
  int64_t t0 = now_ns();
  int fd = open(path, O_RDONLY | (direct ? O_DIRECT : 0));
  if (fd < 0) die(path);
  long long total = 0;
  for (;;) {
    size_t ask = bs;
    if (want >= 0) {
      if (total >= want) break;
      if ((long long)ask > want - total) ask = (size_t)(want - total);
      if (direct) ask = (ask + 4095) & ~(size_t)4095;
    }
    ssize_t n = read(fd, buf, ask);
    if (n < 0) { if (errno == EINTR) continue; die("read"); }
    if (n == 0) break;
    total += n;
  }
  close(fd);
  int64_t t1 = now_ns();
  if (want >= 0 && total > want) total = want;
  double secs = (t1 - t0) / 1e9;
  printf("bytes=%lld secs=%.6f mbps=%.1f\n", total, secs, total / secs / 1e6);
  if (want >= 0 && total < want) { fprintf(stderr, "bt read: short file %s (%lld < %lld)\n", path, total, want); return 1; }
  return 0;
}

static int cmd_read_ranges(int argc, char **argv) {
  if (argc < 4) { fprintf(stderr, "usage: bt read-ranges PATH RANGES [AHEAD]\n"); return 2; }
  int ahead = argc > 4 ? atoi(argv[4]) : 0;
  FILE *rf = fopen(argv[3], "r");
  if (!rf) die(argv[3]);
  size_t n = 0, cap = 1024;
  long long *off = malloc(cap * sizeof *off), *len = malloc(cap * sizeof *len);
  while (fscanf(rf, "%lld %lld", &off[n], &len[n]) == 2) {
    if (++n == cap) { cap *= 2; off = realloc(off, cap * sizeof *off); len = realloc(len, cap * sizeof *len); }
  }
  fclose(rf);
  size_t bs = 1 << 20;
  char *buf = malloc(bs);
  int64_t t0 = now_ns();
  int fd = open(argv[2], O_RDONLY);
  if (fd < 0) die(argv[2]);
  long long total = 0;
  for (size_t i = 0; i < n; i++) {
    for (size_t j = i + 1; j < n && j <= i + (size_t)ahead; j++) posix_fadvise(fd, off[j], len[j], POSIX_FADV_WILLNEED);
    long long o = off[i], end = off[i] + len[i];
    while (o < end) {
      size_t k = end - o < (long long)bs ? (size_t)(end - o) : bs;
      ssize_t r = pread(fd, buf, k, o);
      if (r < 0) { if (errno == EINTR) continue; die("pread"); }
      if (r == 0) { fprintf(stderr, "bt read-ranges: short file\n"); return 1; }
      o += r; total += r;
    }
  }
  close(fd);
  double secs = (now_ns() - t0) / 1e9;
  printf("bytes=%lld secs=%.6f mbps=%.1f\n", total, secs, total / secs / 1e6);
  return 0;
}

static int run_once(char **argv, int64_t *ns) {
  int64_t t0 = now_ns();
  pid_t p = spawn(argv);
  int s;
  if (waitpid(p, &s, 0) != p) die("waitpid");
  *ns = now_ns() - t0;
  return WIFEXITED(s) ? WEXITSTATUS(s) : 128 + WTERMSIG(s);
}

static int cmd_runs(int argc, char **argv) {
  if (argc < 5) { fprintf(stderr, "usage: bt runs N WARMUP CMD...\n"); return 2; }
  int n = atoi(argv[2]), warm = atoi(argv[3]);
  int64_t ns;
  for (int i = 0; i < warm; i++)
    if (run_once(argv + 4, &ns)) { fprintf(stderr, "bt runs: %s failed\n", argv[4]); return 1; }
  for (int i = 0; i < n; i++) {
    int rc = run_once(argv + 4, &ns);
    if (rc) { fprintf(stderr, "bt runs: %s exited %d\n", argv[4], rc); return 1; }
    printf("%.1f\n", ns / 1000.0);
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 3) { fprintf(stderr, "usage: bt mount-wait|stat|first-byte|read|read-ranges|runs ...\n"); return 2; }
  if (!strcmp(argv[1], "mount-wait")) return cmd_mount_wait(argc, argv);
  if (!strcmp(argv[1], "stat")) return cmd_stat(argv[2]);
  if (!strcmp(argv[1], "first-byte")) return cmd_first_byte(argv[2]);
  if (!strcmp(argv[1], "read")) return cmd_read(argc, argv);
  if (!strcmp(argv[1], "read-ranges")) return cmd_read_ranges(argc, argv);
  if (!strcmp(argv[1], "runs")) return cmd_runs(argc, argv);
  fprintf(stderr, "bt: unknown command %s\n", argv[1]);
  return 2;
}
