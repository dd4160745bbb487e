/* Finding and loading libdnnl.so.3 and libgomp.so.1 (see dl.h). */
#define _GNU_SOURCE
#include "dl.h"

#include <dlfcn.h>
#include <fenv.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DNNL_DEFINE_PTR(name) __typeof__(&name) dl_##name;
DNNL_FUNCS(DNNL_DEFINE_PTR)
#undef DNNL_DEFINE_PTR

/* Set by nnplug_backend_onednn.library_path() to the wheel's libdnnl.so.3. */
#define LIBRARY_ENV "NNPLUG_ONEDNN_LIBRARY"

static void *g_gomp, *g_dnnl;
static void (*g_omp_set_num_threads)(int);
static void (*g_gomp_parallel)(void (*)(void *), void *, unsigned, unsigned);
static int (*g_omp_get_thread_num)(void), (*g_omp_get_num_threads)(void);

/* How long an OpenMP thread spins before it sleeps. It covers the gaps inside a run: between
 * two primitives, and while a thread that finished its share of one waits for the others.
 * Measured on a 2-core VM: 10 us left many such waits to a sleep and the 70-80 us wake-up
 * (MobileNetV3-Large at 2 threads 2.9 ms, against 2.6 at 20 us and 9.5 with no spin); much
 * longer spins cost a loaded machine (29 ms at 100 us beside one busy process). */
#define SPIN_NS 20000.0

/* libgomp's spin count (GOMP_SPINCOUNT) that lasts about SPIN_NS here: its wait loop is a
 * relaxed load and a pause instruction, whose cost differs several times between CPUs. */
static long spin_count(void)
{
    double best = 0;
    for (int trial = 0; trial < 3; trial++) {
        volatile int flag = 0;
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (int i = 0; i < 1000; i++) {
            if (flag) break;
#if defined(__x86_64__) || defined(__i386__)
            __builtin_ia32_pause();
#endif
        }
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double ns = (double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec);
        if (ns > 0 && (best == 0 || ns < best)) best = ns; /* the fastest trial: no preemption */
    }
    long n = best > 0 ? (long)(SPIN_NS / (best / 1000.0)) : 2000;
    return n < 200 ? 200 : n > 100000 ? 100000 : n;
}

int dl_load(char *err, size_t errlen)
{
    /* GNU OpenMP spins for milliseconds between parallel regions by default, which makes runs
     * many times slower on a loaded machine: its threads wait passively, after a spin of about
     * 20 us (see SPIN_NS). libgomp reads these once, when it loads; a user's own settings win. */
    setenv("OMP_WAIT_POLICY", "passive", 0);
    if (!getenv("GOMP_SPINCOUNT")) {
        char count[32];
        snprintf(count, sizeof count, "%ld", spin_count());
        setenv("GOMP_SPINCOUNT", count, 0);
    }
    g_gomp = dlopen("libgomp.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (!g_gomp) {
        snprintf(err, errlen,
                 "cannot load libgomp.so.1, the GNU OpenMP runtime oneDNN needs (%s). "
                 "Fix: install it (Debian/Ubuntu: apt install libgomp1)",
                 dlerror());
        return 1;
    }
    g_omp_set_num_threads = (void (*)(int))dlsym(g_gomp, "omp_set_num_threads");
    /* the entry point of `#pragma omp parallel` (libgomp 4.9+): the backend's own loops run
     * on the threads oneDNN's primitives use */
    g_gomp_parallel =
        (void (*)(void (*)(void *), void *, unsigned, unsigned))dlsym(g_gomp, "GOMP_parallel");
    g_omp_get_thread_num = (int (*)(void))dlsym(g_gomp, "omp_get_thread_num");
    g_omp_get_num_threads = (int (*)(void))dlsym(g_gomp, "omp_get_num_threads");
    if (!g_omp_get_thread_num || !g_omp_get_num_threads) g_gomp_parallel = NULL;
    const char *path = getenv(LIBRARY_ENV);
    if (!path || !path[0]) path = "libdnnl.so.3";
    g_dnnl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!g_dnnl) {
        snprintf(err, errlen,
                 "cannot load oneDNN from %s (%s). Fix: pip install "
                 "onednn-cpu-gomp==2023.2.0 (nnplug_backend_onednn finds its libdnnl.so.3), "
                 "or set %s to the path of libdnnl.so.3",
                 path, dlerror(), LIBRARY_ENV);
        return 1;
    }
#define DNNL_RESOLVE(name)                                                        \
    dl_##name = (__typeof__(&name))dlsym(g_dnnl, #name);                          \
    if (!dl_##name) {                                                             \
        snprintf(err, errlen,                                                     \
                 "%s has no function %s: it is not oneDNN 3.2. Fix: pip install " \
                 "onednn-cpu-gomp==2023.2.0",                                     \
                 path, #name);                                                    \
        return 1;                                                                 \
    }
    DNNL_FUNCS(DNNL_RESOLVE)
#undef DNNL_RESOLVE
    const dnnl_version_t *v = D(dnnl_version)();
    if (!v || v->major != 3) {
        snprintf(err, errlen,
                 "%s is oneDNN %d.%d; this backend needs 3.x. Fix: pip install "
                 "onednn-cpu-gomp==2023.2.0",
                 path, v ? v->major : -1, v ? v->minor : -1);
        return 1;
    }
    return 0;
}

void dl_unload(void)
{
    /* oneDNN keeps thread-local state and OpenMP keeps its threads: unloading either while
     * the process lives is unsafe, so both stay loaded. */
}

void dl_omp_set_num_threads(int n)
{
    if (g_omp_set_num_threads && n > 0) g_omp_set_num_threads(n);
}

void dl_parallel(void (*fn)(void *), void *arg, int n)
{
    if (n > 1 && g_gomp_parallel) g_gomp_parallel(fn, arg, (unsigned)n, 0);
    else fn(arg);
}

void dl_team(int *me, int *n)
{
    *me = g_gomp_parallel ? g_omp_get_thread_num() : 0;
    *n = g_gomp_parallel ? g_omp_get_num_threads() : 1;
    if (*n < 1 || *me < 0 || *me >= *n) {
        *me = 0;
        *n = 1;
    }
}

void dl_share(int64_t total, int64_t *t0, int64_t *t1)
{
    int me, n;
    dl_team(&me, &n);
    *t0 = total * me / n;
    *t1 = total * (me + 1) / n;
}

/* ---- the team kept apart during a run --------------------------------------------------- */

#define APART_MAX 16 /* members kept apart; a larger team's others run where the kernel puts them */

typedef struct {
    unsigned long long claimed[CPU_SETSIZE / 64]; /* one bit a CPU some member runs on */
    pid_t tid[APART_MAX]; /* 0: this member is left alone */
    int cpu[APART_MAX];
    cpu_set_t mask[APART_MAX]; /* each member's own affinity, given back by dl_together */
    int n;
} apart_team;

static __thread apart_team t_apart; /* the calling thread's team while it is kept apart */
static __thread int t_apart_held;

/* Claim cpu for one member: 1 if no other member had it. */
static int claim_cpu(apart_team *t, int cpu)
{
    if (cpu < 0 || cpu >= CPU_SETSIZE) return 0;
    unsigned long long bit = 1ull << (cpu % 64);
    return !(__atomic_fetch_or(&t->claimed[cpu / 64], bit, __ATOMIC_RELAXED) & bit);
}

/* Each member: its thread id, its affinity, and a CPU of its own within it (the one it runs on
 * unless another member has that one, else the first no member has). */
static void apart_part(void *arg)
{
    apart_team *t = arg;
    int me, n;
    dl_team(&me, &n);
    if (me >= APART_MAX) return;
    t->tid[me] = 0;
    if (sched_getaffinity(0, sizeof t->mask[me], &t->mask[me])) return;
    int cpu = sched_getcpu();
    if (!claim_cpu(t, cpu))
        for (cpu = 0; cpu < CPU_SETSIZE; cpu++)
            if (CPU_ISSET(cpu, &t->mask[me]) && claim_cpu(t, cpu)) break;
    if (cpu >= CPU_SETSIZE) return; /* more members than CPUs: this one is left alone */
    t->cpu[me] = cpu;
    t->tid[me] = gettid();
}

int dl_apart(int n)
{
    if (n < 2 || !g_gomp_parallel || t_apart_held) return 0;
    apart_team *t = &t_apart;
    memset(t->claimed, 0, sizeof t->claimed);
    t->n = n < APART_MAX ? n : APART_MAX;
    for (int i = 0; i < t->n; i++) t->tid[i] = 0;
    dl_parallel(apart_part, t, n);
    /* each member may run anywhere its affinity allows but on the others' CPUs */
    for (int i = 0; i < t->n; i++) {
        if (!t->tid[i]) continue;
        cpu_set_t away = t->mask[i];
        for (int j = 0; j < t->n; j++)
            if (j != i && t->tid[j]) CPU_CLR(t->cpu[j], &away);
        if (!CPU_COUNT(&away) || CPU_EQUAL(&away, &t->mask[i]) ||
            sched_setaffinity(t->tid[i], sizeof away, &away))
            t->tid[i] = 0; /* nothing to give back */
    }
    t_apart_held = 1;
    return 1;
}

void dl_together(void)
{
    if (!t_apart_held) return;
    apart_team *t = &t_apart;
    for (int i = 0; i < t->n; i++)
        if (t->tid[i]) sched_setaffinity(t->tid[i], sizeof t->mask[i], &t->mask[i]);
    t_apart_held = 0;
}

#if defined(__x86_64__)
/* On x86-64 every float operation here and in oneDNN's kernels is SSE/AVX: the flags that
 * matter are MXCSR's. feclearexcept also saves and reloads the x87 environment, about as long
 * as a one-node run's whole kernel (5% of it, perf). */
#define MADE_NONFINITE (_MM_EXCEPT_INVALID | _MM_EXCEPT_OVERFLOW | _MM_EXCEPT_DIV_ZERO)
static void fp_flags_clear(void)
{
    _mm_setcsr(_mm_getcsr() & ~(unsigned)MADE_NONFINITE);
}
static int fp_flags_raised(void)
{
    return (_mm_getcsr() & MADE_NONFINITE) != 0;
}
#else
#define MADE_NONFINITE (FE_INVALID | FE_OVERFLOW | FE_DIVBYZERO)
static void fp_flags_clear(void)
{
    feclearexcept(MADE_NONFINITE);
}
static int fp_flags_raised(void)
{
    return fetestexcept(MADE_NONFINITE) != 0;
}
#endif

static void fp_clear(void *arg)
{
    (void)arg;
    fp_flags_clear();
}

static void fp_take(void *raised)
{
    if (fp_flags_raised()) __atomic_store_n((int *)raised, 1, __ATOMIC_RELAXED);
    fp_flags_clear();
}

/* A team of n reuses the pool threads that oneDNN's regions of n (or fewer) threads ran on:
 * libgomp keeps one pool per calling thread. */
void dl_fp_clear(int n)
{
    dl_parallel(fp_clear, NULL, n);
    fp_clear(NULL); /* the caller, also when libgomp gave a smaller team */
}

int dl_fp_raised(int n)
{
    int raised = n > 1 && !g_gomp_parallel;
    dl_parallel(fp_take, &raised, n);
    fp_take(&raised);
    return raised;
}

int dl_avx2_fma(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

int dl_amx(void)
{
    dnnl_cpu_isa_t isa = D(dnnl_get_effective_cpu_isa)();
    return (isa & dnnl_cpu_isa_avx512_core_amx) == dnnl_cpu_isa_avx512_core_amx;
}

int dl_cpu_amd(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_is("amd");
}
