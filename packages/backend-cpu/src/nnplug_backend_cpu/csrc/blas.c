/* OpenBLAS, found at run time. The backend .so does not link it, so the same file works
 * from a wheel and when copied into a dynamic-backends folder; a missing library is a
 * load error naming the library and the fix. */
#define _GNU_SOURCE
#include "nnc.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#define OPENBLAS_SONAME "libscipy_openblas.so"

enum { CblasRowMajor = 101, CblasNoTrans = 111, CblasTrans = 112 };
typedef void (*sgemm_fn)(int, int, int, int, int, int, float, const float *, int, const float *,
                         int, float, float *, int);
typedef void (*set_threads_fn)(int);
typedef char *(*get_config_fn)(void);

static sgemm_fn g_sgemm;
static void *g_handle;
static char g_info[512];

static int resolve(void *h)
{
    sgemm_fn f = (sgemm_fn)dlsym(h, "scipy_cblas_sgemm");
    set_threads_fn st = (set_threads_fn)dlsym(h, "scipy_openblas_set_num_threads");
    get_config_fn gc = (get_config_fn)dlsym(h, "scipy_openblas_get_config");
    if (!f) { /* a plain OpenBLAS given by path */
        f = (sgemm_fn)dlsym(h, "cblas_sgemm");
        st = (set_threads_fn)dlsym(h, "openblas_set_num_threads");
        gc = (get_config_fn)dlsym(h, "openblas_get_config");
    }
    if (!f) return 0;
    /* The backend splits work over its own threads and calls BLAS from each. */
    if (st) st(1);
    snprintf(g_info, sizeof g_info, "%s", gc ? gc() : "cblas");
    g_sgemm = f;
    return 1;
}

static int try_path(const char *path, int flags)
{
    if (!path || !*path) return 0;
    void *h = dlopen(path, flags);
    if (!h) return 0;
    if (resolve(h)) { g_handle = h; return 1; }
    dlclose(h);
    return 0;
}

static void self_dir(char *buf, size_t n)
{
    Dl_info info;
    buf[0] = 0;
    if (dladdr((void *)&self_dir, &info) && info.dli_fname) {
        snprintf(buf, n, "%s", info.dli_fname);
        char *slash = strrchr(buf, '/');
        if (slash) *slash = 0; else buf[0] = 0;
    }
}

/* The scipy-openblas32 copy of the Python environment hosting us: any mapped file under a
 * site-packages (or dist-packages) folder names that folder. */
static int try_site_packages(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[4400], tried[8][4096];
    int ntried = 0, ok = 0;
    if (!f) return 0;
    while (!ok && fgets(line, sizeof line, f)) {
        char *path = strchr(line, '/');
        if (!path) continue;
        path[strcspn(path, "\n")] = 0;
        const char *marks[] = {"/site-packages/", "/dist-packages/"};
        for (int m = 0; m < 2 && !ok; m++) {
            char *hit = strstr(path, marks[m]);
            if (!hit) continue;
            size_t len = (size_t)(hit - path) + strlen(marks[m]);
            char cand[4096];
            if (len + 64 >= sizeof cand) continue;
            memcpy(cand, path, len);
            snprintf(cand + len, sizeof cand - len, "scipy_openblas32/lib/" OPENBLAS_SONAME);
            int seen = 0;
            for (int i = 0; i < ntried; i++) seen |= !strcmp(tried[i], cand);
            if (seen) continue;
            if (ntried < 8) snprintf(tried[ntried++], sizeof tried[0], "%s", cand);
            ok = try_path(cand, RTLD_NOW | RTLD_LOCAL);
        }
    }
    fclose(f);
    return ok;
}

int nnc_blas_load(const char *hint, nnc_err *e)
{
    if (g_sgemm) return NNC_OK;
    char beside[4096], dir[3800];
    self_dir(dir, sizeof dir);
    snprintf(beside, sizeof beside, "%s/%s", dir[0] ? dir : ".", OPENBLAS_SONAME);
    if (try_path(hint, RTLD_NOW | RTLD_LOCAL)) return NNC_OK;
    const char *env = getenv("NNPLUG_CPU_OPENBLAS");
    if (env && *env) {
        if (try_path(env, RTLD_NOW | RTLD_LOCAL)) return NNC_OK;
        const char *why = dlerror();
        return nnc_fail(e,
            "NNPLUG_CPU_OPENBLAS=%s: cannot load it as OpenBLAS (%s). Fix: point NNPLUG_CPU_OPENBLAS "
            "at " OPENBLAS_SONAME " from the scipy-openblas32 package (python -c \"import "
            "scipy_openblas32, os; print(os.path.join(scipy_openblas32.get_lib_dir(), "
            "scipy_openblas32.get_library(True)))\"), or unset it", env,
            why ? why : "no cblas_sgemm in it");
    }
    if (try_path(OPENBLAS_SONAME, RTLD_NOW | RTLD_NOLOAD)) return NNC_OK; /* already loaded */
    if (try_path(beside, RTLD_NOW | RTLD_LOCAL)) return NNC_OK;
    if (try_site_packages()) return NNC_OK;
    if (try_path(OPENBLAS_SONAME, RTLD_NOW | RTLD_LOCAL)) return NNC_OK; /* LD_LIBRARY_PATH */
    const char *why = dlerror();
    return nnc_fail(e,
        "the cpu backend needs " OPENBLAS_SONAME " (OpenBLAS from the scipy-openblas32 package) "
        "and could not find it (%s). Fix: `pip install scipy-openblas32` in this Python "
        "environment, or set NNPLUG_CPU_OPENBLAS to the full path of " OPENBLAS_SONAME
        ", or copy that file into %s", why ? why : "not found", dir[0] ? dir : "the backend's folder");
}

const char *nnc_blas_info(void) { return g_info; }

void nnc_sgemm(int transa, int transb, int64_t m, int64_t n, int64_t k, float alpha,
               const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c,
               int64_t ldc)
{
    if (m <= 0 || n <= 0) return;
    if (k <= 0) { /* C = beta*C */
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) c[i * ldc + j] = beta == 0.f ? 0.f : beta * c[i * ldc + j];
        return;
    }
    g_sgemm(CblasRowMajor, transa ? CblasTrans : CblasNoTrans, transb ? CblasTrans : CblasNoTrans,
            (int)m, (int)n, (int)k, alpha, a, (int)lda, b, (int)ldb, beta, c, (int)ldc);
}

