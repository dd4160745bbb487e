/* A small fork-join thread pool for parallel_for.
 *
 * One job runs at a time; a caller that finds the pool busy (another thread is running a
 * network) or is itself a worker runs its range inline, so concurrent runs stay correct and
 * never deadlock. Work is handed out in chunks from an atomic counter. The caller never waits
 * for a worker that has not joined: once every chunk is taken it closes the job and waits
 * only for workers still inside it. So a worker that is descheduled (other processes on the
 * machine) costs nothing, and workers that wake late simply find the job closed. */
#define _GNU_SOURCE
#include "nnc.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#else
#define CPU_RELAX() ((void)0)
#endif

#define MAX_THREADS 64
#define SPIN_ROUNDS 4000 /* polls (~20-50 us) before an idle worker yields or sleeps */
/* How long an idle worker stays awake, outside a run, yielding the CPU between polls, before
 * it sleeps: a caller's next run often starts within a few tens of microseconds (a decoding
 * loop's step, a serving loop), and waking a sleeper costs it a futex system call and the
 * worker's wake-up latency. Polling without yielding there took the CPU from oneDNN's
 * threads running the next partition (a dynamic-int8 BERT on onednn+cpu: 1.25 -> 1.6x). */
#define IDLE_SPIN_NS 200000

static pthread_mutex_t g_init_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t g_submit = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t g_sleep_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_wake = PTHREAD_COND_INITIALIZER;
static pthread_t g_threads[MAX_THREADS];
static int g_nworkers = 0; /* started workers */
static int g_want = 0;     /* total threads including the caller (0 = pool not started) */
static atomic_int g_stop;
static atomic_uint g_gen;  /* bumped for every job */
static atomic_int g_sleepers;
static atomic_int g_open;   /* the current job still hands out chunks */
static atomic_int g_active; /* workers inside the current job */
static atomic_int g_held;   /* runs in progress (nnc_pool_hold): idle workers stay awake */

static struct {
    nnc_range_fn fn;
    void *arg;
    int64_t n, chunk;
    int limit; /* workers with tid >= limit stay out */
    atomic_llong next;
} g_job;

static atomic_int g_tids[MAX_THREADS]; /* each worker's thread id (0: none), for its affinity */

/* What a run changed of the workers' affinity (nnc_pool_hold), given back when it ends. */
static pthread_mutex_t g_hold_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    int moved[MAX_THREADS];
    cpu_set_t mask[MAX_THREADS];
    int64_t start_ns, last_ns; /* the outermost hold's start, the last one's length */
} g_apart = {{0}, {{{0}}}, 0, INT64_MAX};

static _Thread_local int t_in_pool;
static _Thread_local int t_limit;
static _Thread_local int t_holds; /* this thread's holds: only its outermost one counts */

void nnc_set_thread_limit(int limit)
{
    t_limit = limit;
}

static void run_chunks(int tid)
{
    for (;;) {
        int64_t b = atomic_fetch_add(&g_job.next, g_job.chunk);
        if (b >= g_job.n) break;
        int64_t e = b + g_job.chunk < g_job.n ? b + g_job.chunk : g_job.n;
        g_job.fn(g_job.arg, b, e, tid);
    }
}

static void *worker(void *p)
{
    int tid = (int)(intptr_t)p;
    unsigned seen = atomic_load(&g_gen);
    t_in_pool = 1;
    atomic_store(&g_tids[tid], (int)gettid());
    for (;;) {
        int spins = 0;
        int64_t idle_since = 0;
        while (atomic_load(&g_gen) == seen && !atomic_load(&g_stop)) {
            if (++spins < SPIN_ROUNDS) {
                CPU_RELAX();
                continue;
            }
            if (atomic_load(&g_held) >
                0) { /* inside a run: the next job is near; yield, not sleep */
                sched_yield();
                continue;
            }
            if (!idle_since) idle_since = nnc_now_ns();
            if (nnc_now_ns() - idle_since < IDLE_SPIN_NS) {
                /* yield, not poll: another backend's threads (oneDNN's OpenMP team) may be
                 * running the model's next partition on this CPU */
                sched_yield();
                continue;
            }
            pthread_mutex_lock(&g_sleep_lock);
            atomic_fetch_add(&g_sleepers, 1);
            while (atomic_load(&g_gen) == seen && !atomic_load(&g_stop) &&
                   atomic_load(&g_held) == 0)
                pthread_cond_wait(&g_wake, &g_sleep_lock);
            atomic_fetch_sub(&g_sleepers, 1);
            pthread_mutex_unlock(&g_sleep_lock);
        }
        if (atomic_load(&g_stop)) break;
        seen = atomic_load(&g_gen);
        atomic_fetch_add(&g_active, 1); /* join first, then check the job is still open */
        if (atomic_load(&g_open) && tid < g_job.limit) run_chunks(tid);
        atomic_fetch_sub(&g_active, 1);
    }
    return NULL;
}

static int default_threads(void)
{
    const char *env = getenv("NNPLUG_CPU_THREADS");
    if (env && atoi(env) > 0) return atoi(env) > MAX_THREADS ? MAX_THREADS : atoi(env);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
#ifdef __linux__
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) n = CPU_COUNT(&set);
#endif
    if (n < 1) n = 1;
    return n > MAX_THREADS ? MAX_THREADS : (int)n;
}

static void ensure_pool(void)
{
    if (g_want) return;
    pthread_mutex_lock(&g_init_lock);
    if (!g_want) {
        int want = default_threads();
        atomic_store(&g_stop, 0);
        for (int i = 1; i < want; i++) {
            if (pthread_create(&g_threads[i - 1], NULL, worker, (void *)(intptr_t)i) != 0) break;
            g_nworkers++;
        }
        g_want = g_nworkers + 1;
    }
    pthread_mutex_unlock(&g_init_lock);
}

int nnc_num_threads(void)
{
    return g_want ? g_want : default_threads(); /* decided without starting threads */
}

void nnc_threads_shutdown(void)
{
    pthread_mutex_lock(&g_init_lock);
    if (g_want) {
        pthread_mutex_lock(&g_submit);
        atomic_store(&g_stop, 1);
        pthread_mutex_lock(&g_sleep_lock);
        pthread_cond_broadcast(&g_wake);
        pthread_mutex_unlock(&g_sleep_lock);
        for (int i = 0; i < g_nworkers; i++) pthread_join(g_threads[i], NULL);
        for (int i = 0; i <= g_nworkers; i++) atomic_store(&g_tids[i], 0); /* ids may be reused */
        g_nworkers = 0;
        g_want = 0;
        pthread_mutex_unlock(&g_submit);
    }
    pthread_mutex_unlock(&g_init_lock);
}

void nnc_set_num_threads(int n)
{
    nnc_threads_shutdown();
    char buf[16];
    if (n > 0) {
        snprintf(buf, sizeof buf, "%d", n > MAX_THREADS ? MAX_THREADS : n);
        setenv("NNPLUG_CPU_THREADS", buf, 1);
    } else {
        unsetenv("NNPLUG_CPU_THREADS");
    }
}

/* A run at least this long keeps the workers off the CPU of the thread that runs it. */
#define APART_MIN_NS 200000

/* Each worker allowed anywhere its affinity allows but on cpu (g_hold_lock held). On a
 * virtual machine the kernel can wake a sleeping worker onto its waker's CPU and leave it
 * there while the other CPU idles: a 2-thread MobileNetV2 run one request at a time, 0.1 s
 * apart, took 7.9 ms against 6.0 with the workers kept off (4.7 back to back). */
static void keep_apart(int cpu)
{
    for (int i = 1; i <= g_nworkers; i++) {
        g_apart.moved[i] = 0;
        pid_t tid = atomic_load(&g_tids[i]);
        if (cpu < 0 || !tid || sched_getaffinity(tid, sizeof g_apart.mask[i], &g_apart.mask[i]))
            continue;
        cpu_set_t away = g_apart.mask[i];
        CPU_CLR(cpu, &away);
        g_apart.moved[i] = CPU_COUNT(&away) && !CPU_EQUAL(&away, &g_apart.mask[i]) &&
                           !sched_setaffinity(tid, sizeof away, &away);
    }
}

/* A network run keeps the workers awake between its jobs: waking a sleeping worker took
 * longer than many convolutions on these virtual machines (a 2-thread ResNet-50 ran 1.5x, not
 * 2x, its 1-thread speed). While a run holds the pool, an idle worker polls, then yields the
 * CPU between polls (so other processes still get it), and sleeps once no run holds it. The
 * outermost hold also keeps the workers off the caller's CPU (keep_apart) when the last run
 * was long enough to be worth the three system calls a worker, and only when a worker sleeps:
 * a worker still polling (a decoding loop's next step, within IDLE_SPIN_NS) is on a CPU of
 * its own already, and the calls cost a small decoder's step 4-5 %. */
void nnc_pool_hold(void)
{
    if (t_holds++) return; /* a kernel inside this thread's run_dynamic or run_steps */
    pthread_mutex_lock(&g_hold_lock);
    if (atomic_load(&g_held) == 0) {
        g_apart.start_ns = nnc_now_ns();
        if (g_apart.last_ns >= APART_MIN_NS && atomic_load(&g_sleepers) > 0)
            keep_apart(sched_getcpu());
    }
    atomic_fetch_add(&g_held, 1); /* seq_cst: must not pass the sleepers check below */
    pthread_mutex_unlock(&g_hold_lock);
    if (atomic_load(&g_sleepers) > 0) {
        pthread_mutex_lock(&g_sleep_lock);
        pthread_cond_broadcast(&g_wake);
        pthread_mutex_unlock(&g_sleep_lock);
    }
}

void nnc_pool_release(void)
{
    if (--t_holds) return;
    pthread_mutex_lock(&g_hold_lock);
    if (atomic_load(&g_held) == 1) { /* the outermost: the workers get their affinity back */
        for (int i = 1; i <= g_nworkers; i++)
            if (g_apart.moved[i]) {
                sched_setaffinity(atomic_load(&g_tids[i]), sizeof g_apart.mask[i],
                                  &g_apart.mask[i]);
                g_apart.moved[i] = 0;
            }
        g_apart.last_ns = nnc_now_ns() - g_apart.start_ns;
    }
    atomic_fetch_sub(&g_held, 1);
    pthread_mutex_unlock(&g_hold_lock);
}

void nnc_parallel_for(int64_t n, int64_t grain, nnc_range_fn fn, void *arg)
{
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    if (n <= grain || t_in_pool) {
        fn(arg, 0, n, 0);
        return;
    }
    ensure_pool();
    int T = g_nworkers + 1;
    if (t_limit > 0 && t_limit < T) T = t_limit;
    if (T <= 1 || pthread_mutex_trylock(&g_submit) != 0) {
        fn(arg, 0, n, 0);
        return;
    }
    int64_t chunk = (n + T * 4 - 1) / (T * 4);
    if (chunk < grain) chunk = grain;
    g_job.fn = fn;
    g_job.arg = arg;
    g_job.n = n;
    g_job.chunk = chunk;
    g_job.limit = T;
    atomic_store(&g_job.next, 0);
    atomic_store(&g_open, 1);
    atomic_fetch_add(&g_gen, 1); /* seq_cst: must not pass the sleepers check below */
    if (atomic_load(&g_sleepers) > 0) {
        pthread_mutex_lock(&g_sleep_lock);
        pthread_cond_broadcast(&g_wake);
        pthread_mutex_unlock(&g_sleep_lock);
    }
    t_in_pool = 1;
    run_chunks(0);
    t_in_pool = 0;
    atomic_store(&g_open, 0);
    /* only workers inside a chunk; yield when one is slow (the machine may be oversubscribed) */
    for (int spins = 0; atomic_load(&g_active) > 0; spins++) {
        if (spins < 2000) CPU_RELAX();
        else sched_yield();
    }
    pthread_mutex_unlock(&g_submit);
}

__attribute__((destructor)) static void pool_fini(void)
{
    nnc_threads_shutdown();
}
