/*
 * first_pages DIR THREADS — the least an exact listing must read: the first
 * page of every regular file under DIR (opened, read, closed), THREADS at a
 * time. kpackfs must know which files are fat binaries to list `.kpack`,
 * and only a file's first bytes say so; bench/tree.sh times this cold as
 * the floor under a cold readdir-only walk of the view. Prints
 * "files=N secs=S".
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static char **paths;
static size_t n, cap;
static int threads;

static void add(const char *p) {
  if (n == cap) {
    cap = cap ? cap * 2 : 1024;
    paths = realloc(paths, cap * sizeof *paths);
    if (!paths) { perror("realloc"); exit(1); }
  }
  paths[n++] = strdup(p);
}

static void walk(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *e;
  char p[4096];
  while ((e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
    if (e->d_type == DT_DIR) walk(p);
    else if (e->d_type == DT_REG) add(p);
  }
  closedir(d);
}

static void *work(void *arg) {
  char buf[4096];
  for (size_t i = (size_t)arg; i < n; i += (size_t)threads) {
    int fd = open(paths[i], O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    if (pread(fd, buf, sizeof buf, 0) < 0) perror(paths[i]);
    close(fd);
  }
  return NULL;
}

int main(int argc, char **argv) {
  if (argc != 3) { fprintf(stderr, "usage: first_pages DIR THREADS\n"); return 2; }
  threads = atoi(argv[2]);
  if (threads < 1 || threads > 256) { fprintf(stderr, "first_pages: THREADS is 1..256\n"); return 2; }
  walk(argv[1]);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  pthread_t th[256];
  for (int i = 0; i < threads; i++) pthread_create(&th[i], NULL, work, (void *)(size_t)i);
  for (int i = 0; i < threads; i++) pthread_join(th[i], NULL);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  printf("files=%zu secs=%.6f\n", n, (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9);
  return 0;
}
