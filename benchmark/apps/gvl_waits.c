/*
 * gvl_waits.so: an LD_PRELOAD diagnostic that shows which threads wait for
 * Ruby's GVL, and how long, on Ruby 3.1 (thread_pthread.c: a thread that
 * wants the GVL while another holds it waits in pthread_cond_wait /
 * pthread_cond_timedwait on its own condvar, with the GVL's lock as the
 * mutex). Used for docs/design-details.md, "Fair under load".
 *
 * Every condvar wait is timed. An "episode" is a run of waits by one
 * thread on one mutex with less than 100 us between them (a GVL waiter
 * that loses the race for a freed GVL waits again). At exit, for the
 * mutex the most threads waited on (the GVL's lock), it writes one line per
 * thread name to $GVL_WAITS.<pid>: episodes, their p99 and max, and how
 * many lasted more than 10 ms.
 *
 *   cc -O2 -shared -fPIC -o gvl_waits.so gvl_waits.c -ldl -lpthread
 *   GVL_WAITS=/tmp/w LD_PRELOAD=./gvl_waits.so ruby ...
 *
 * Not part of the gem; reads nothing of Ruby's internals.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_THREADS 256
#define MAX_EPISODES 200000

struct tstat {
    pthread_t tid;
    char name[16];
    const void *mutex;      /* the mutex of the current episode */
    double ep_start, ep_last;
    double *eps;            /* episode lengths (s) on `mutex` */
    const void **epm;       /* the mutex of each episode */
    int n;
};

static struct tstat threads[MAX_THREADS];
static int nthreads;
static pthread_mutex_t reg = PTHREAD_MUTEX_INITIALIZER;
static int (*real_wait)(pthread_cond_t *, pthread_mutex_t *);
static int (*real_timedwait)(pthread_cond_t *, pthread_mutex_t *, const struct timespec *);

/* waits per mutex, to find the GVL's lock at exit */
#define MAX_MUTEXES 64
static const void *mutexes[MAX_MUTEXES];
static unsigned long long mutex_threads[MAX_MUTEXES][MAX_THREADS / 64];

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static struct tstat *me(void) {
    static __thread struct tstat *mine;
    if (mine) return mine;
    pthread_mutex_lock(&reg);
    if (nthreads < MAX_THREADS) {
        mine = &threads[nthreads++];
        mine->tid = pthread_self();
        mine->eps = calloc(MAX_EPISODES, sizeof(double));
        mine->epm = calloc(MAX_EPISODES, sizeof(void *));
    }
    pthread_mutex_unlock(&reg);
    return mine;
}

static void account(const void *m, double t0, double t1) {
    struct tstat *t = me();
    if (!t) return;
    pthread_getname_np(pthread_self(), t->name, sizeof t->name);
    pthread_mutex_lock(&reg);
    int i;
    for (i = 0; i < MAX_MUTEXES && mutexes[i] && mutexes[i] != m; i++);
    if (i < MAX_MUTEXES) {
        int ti = (int)(t - threads);
        mutexes[i] = m;
        mutex_threads[i][ti / 64] |= 1ULL << (ti % 64);
    }
    pthread_mutex_unlock(&reg);
    if (t->mutex == m && t0 - t->ep_last < 100e-6) {
        t->ep_last = t1;
        if (t->n > 0 && t->epm[t->n - 1] == m) t->eps[t->n - 1] = t1 - t->ep_start;
        return;
    }
    t->mutex = m;
    t->ep_start = t0;
    t->ep_last = t1;
    if (t->n < MAX_EPISODES) {
        t->epm[t->n] = m;
        t->eps[t->n++] = t1 - t0;
    }
}

int pthread_cond_wait(pthread_cond_t *c, pthread_mutex_t *m) {
    if (!real_wait) real_wait = dlvsym(RTLD_NEXT, "pthread_cond_wait", "GLIBC_2.3.2");
    double t0 = now();
    int r = real_wait(c, m);
    account(m, t0, now());
    return r;
}

int pthread_cond_timedwait(pthread_cond_t *c, pthread_mutex_t *m, const struct timespec *ts) {
    if (!real_timedwait) real_timedwait = dlvsym(RTLD_NEXT, "pthread_cond_timedwait", "GLIBC_2.3.2");
    double t0 = now();
    int r = real_timedwait(c, m, ts);
    account(m, t0, now());
    return r;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

__attribute__((destructor)) void gvl_waits_report(void) {
    static int done;
    if (done++) return;
    const char *path = getenv("GVL_WAITS");
    if (!path) return;
    /* the GVL's lock: the mutex the most threads waited on */
    int best = 0, most = -1;
    for (int i = 0; i < MAX_MUTEXES && mutexes[i]; i++) {
        int n = 0;
        for (int w = 0; w < MAX_THREADS / 64; w++) n += __builtin_popcountll(mutex_threads[i][w]);
        if (n > most) { most = n; best = i; }
    }
    char file[512];
    snprintf(file, sizeof file, "%s.%d", path, (int)getpid());
    FILE *f = fopen(file, "w");
    if (!f) return;
    /* merge threads by name */
    for (int i = 0; i < nthreads; i++) {
        if (!threads[i].name[0]) continue;
        double *all = calloc(MAX_EPISODES, sizeof(double));
        int n = 0;
        for (int j = i; j < nthreads; j++) {
            if (strcmp(threads[j].name, threads[i].name)) continue;
            for (int k = 0; k < threads[j].n && n < MAX_EPISODES; k++)
                if (threads[j].epm[k] == mutexes[best]) all[n++] = threads[j].eps[k];
            if (j != i) threads[j].name[0] = 0;
        }
        if (n) {
            qsort(all, n, sizeof(double), cmp);
            int over = 0;
            for (int k = 0; k < n; k++) over += all[k] > 0.010;
            fprintf(f, "%-16s waits %7d  p99 %8.2f ms  max %8.2f ms  >10ms %d\n", threads[i].name, n,
                    all[(int)(n * 0.99)] * 1e3, all[n - 1] * 1e3, over);
        }
        free(all);
    }
    fclose(f);
}
