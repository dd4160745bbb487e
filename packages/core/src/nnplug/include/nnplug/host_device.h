/*
 * nnplug/host_device.h -- the device API of nnplug/backend.h for a backend whose device memory
 * IS host memory (NNP_BACKEND_HOST_VISIBLE, device {NNP_DEVICE_CPU, 0}), written once so that
 * such backends share it instead of copying it: the calling thread's last-error text,
 * attributes every host shares, allocation, copies, workspaces and streams.
 *
 * Use it from the ONE .c file that defines the backend's table (every function here is static
 * to the file that includes it, and so is the error text):
 *
 *     #define _POSIX_C_SOURCE 200809L   // or _GNU_SOURCE: before the first #include
 *     #include <nnplug/host_device.h>
 *
 *     static const nnp_backend_v1 table = {
 *         ...
 *         .last_error = nnp_host_last_error,
 *         .get_attr = nnp_host_get_attr,       // or a function that calls it, then adds its own
 *         NNP_HOST_DEVICE_MEMORY,              // alloc_data_space, free_data_space, copy
 *         NNP_HOST_DEVICE_STREAMS,             // optional: set_device, workspaces, streams
 *         ...
 *     };
 *
 * and record every failure of the backend's own entries with nnp_host_fail(status, fmt, ...),
 * so that last_error() returns the latest message whichever entry failed.
 *
 * Behaviour (what the host relies on; see backend.h's device API):
 * - The device is {NNP_DEVICE_CPU, 0}: alloc, set_device and streams refuse any other with
 *   NNP_STATUS_INVALID_ARGUMENT; get_attr answers EXIST = 0 for it and nothing else.
 * - alloc_data_space hands out host pointers aligned to max(alignment, 64) bytes
 *   (posix_memalign); free_data_space frees them (NULL: no-op).
 * - copy_data_from_to is a memmove, complete on return whatever the stream.
 * - Streams are tokens: host work completes before each call returns, so synchronising has
 *   nothing to wait for.
 *
 * VERSIONING: NNP_HOST_DEVICE_VERSION grows by one when a function is added here; a function is
 * never removed or changed in meaning within backend ABI major 1. Needs only the C library
 * (POSIX: posix_memalign, sysconf).
 */
#ifndef NNPLUG_HOST_DEVICE_H_
#define NNPLUG_HOST_DEVICE_H_

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nnplug/backend.h"

#if !defined(_POSIX_C_SOURCE) || _POSIX_C_SOURCE < 200112L
#error \
    "nnplug/host_device.h needs POSIX (posix_memalign, sysconf): #define _POSIX_C_SOURCE 200809L (or _GNU_SOURCE) before the first #include"
#endif

#if NNP_BACKEND_ABI_MAJOR != 1
#error "nnplug/host_device.h implements the device API of backend ABI major 1"
#endif

#define NNP_HOST_DEVICE_VERSION 1

/* The longest message last_error() returns (bytes, with the terminating NUL). */
#define NNP_HOST_ERROR_BYTES 1024

/* Thread-local storage: C++11, C11, or GNU C before C11. */
#if defined(__cplusplus)
#define NNP_HOST_THREAD_LOCAL thread_local
#elif defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
#define NNP_HOST_THREAD_LOCAL _Thread_local
#elif defined(__GNUC__) || defined(__clang__)
#define NNP_HOST_THREAD_LOCAL __thread
#else
#error "nnplug/host_device.h needs thread-local storage: compile as C11, C++11 or GNU C"
#endif

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) || defined(__clang__)
#define NNP_HOST_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define NNP_HOST_PRINTF(f, a)
#endif

/* ---- errors ------------------------------------------------------------------------------- */

/* The calling thread's message buffer (NNP_HOST_ERROR_BYTES bytes). Write into it directly only
 * to copy a message made elsewhere; otherwise use nnp_host_fail. */
static inline char *nnp_host_error_text(void)
{
    static NNP_HOST_THREAD_LOCAL char text[NNP_HOST_ERROR_BYTES];
    return text;
}

/* Record a message for last_error() and return `status`:
 *     return nnp_host_fail(NNP_STATUS_INVALID_ARGUMENT, "fuse: %d nodes", n); */
static inline NNP_HOST_PRINTF(2, 3) nnp_status
    nnp_host_fail(nnp_status status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(nnp_host_error_text(), NNP_HOST_ERROR_BYTES, fmt, ap);
    va_end(ap);
    return status;
}

/* last_error: the calling thread's latest message, "" before any failure. */
static inline const char *nnp_host_last_error(void)
{
    return nnp_host_error_text();
}

/* ---- the device --------------------------------------------------------------------------- */

/* Whether `dev` is the one device these functions serve: {NNP_DEVICE_CPU, 0}. */
static inline int nnp_host_is_device(nnp_device dev)
{
    return dev.device_type == NNP_DEVICE_CPU && dev.device_id == 0;
}

static inline nnp_status nnp_host_check_device(nnp_device dev, const char *call)
{
    if (nnp_host_is_device(dev)) return NNP_OK;
    return nnp_host_fail(NNP_STATUS_INVALID_ARGUMENT, "%s: device %d:%d is not the cpu", call,
                         (int)dev.device_type, (int)dev.device_id);
}

/* A /proc/meminfo value in bytes ("MemTotal", "MemAvailable"), or -1. */
static inline int64_t nnp_host_meminfo(const char *key)
{
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    int64_t v = -1;
    size_t kl = strlen(key);
    if (!f) return -1;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, key, kl) && line[kl] == ':') {
            v = atoll(line + kl + 1) * 1024;
            break;
        }
    fclose(f);
    return v;
}

/* get_attr for what every host answers alike: EXIST, MULTI_PROCESSOR_COUNT (online cores),
 * TOTAL_GLOBAL_MEMORY and AVAILABLE_GLOBAL_MEMORY (/proc/meminfo's MemTotal and MemAvailable);
 * other kinds stay NNP_ATTR_VALUE_NONE. A backend's own get_attr calls it first, then answers
 * or overrides the kinds it knows better (its thread count, its library's version). */
static inline nnp_status nnp_host_get_attr(nnp_device dev, int32_t kind, nnp_attr_value *out)
{
    if (!out) return nnp_host_fail(NNP_STATUS_INVALID_ARGUMENT, "get_attr: out is NULL");
    if (kind == NNP_DEVICE_ATTR_EXIST) {
        out->type = NNP_ATTR_VALUE_INT;
        out->i = nnp_host_is_device(dev);
        return NNP_OK;
    }
    if (!nnp_host_is_device(dev)) return NNP_OK; /* no such device: nothing to tell */
    int64_t v = -1;
    switch (kind) {
    case NNP_DEVICE_ATTR_MULTI_PROCESSOR_COUNT: v = sysconf(_SC_NPROCESSORS_ONLN); break;
    case NNP_DEVICE_ATTR_TOTAL_GLOBAL_MEMORY: v = nnp_host_meminfo("MemTotal"); break;
    case NNP_DEVICE_ATTR_AVAILABLE_GLOBAL_MEMORY: v = nnp_host_meminfo("MemAvailable"); break;
    default: break;
    }
    if (v >= 0) {
        out->type = NNP_ATTR_VALUE_INT;
        out->i = v;
    }
    return NNP_OK;
}

/* ---- memory ------------------------------------------------------------------------------- */

static inline nnp_status nnp_host_alloc_data_space(nnp_device dev, uint64_t nbytes,
                                                   uint64_t alignment, nnp_dtype type_hint,
                                                   void **out)
{
    (void)type_hint;
    if (!out) return nnp_host_fail(NNP_STATUS_INVALID_ARGUMENT, "alloc_data_space: out is NULL");
    *out = NULL;
    nnp_status rc = nnp_host_check_device(dev, "alloc_data_space");
    if (rc != NNP_OK) return rc;
    if (nbytes == 0)
        return nnp_host_fail(NNP_STATUS_INVALID_ARGUMENT, "alloc_data_space: nbytes is 0");
    if (alignment == 0 || (alignment & (alignment - 1)))
        return nnp_host_fail(NNP_STATUS_INVALID_ARGUMENT,
                             "alloc_data_space: alignment %llu is not a power of two",
                             (unsigned long long)alignment);
    if (alignment < 64) alignment = 64; /* a cache line: vector loads never straddle two */
    void *p = NULL;
    if (nbytes > (uint64_t)SIZE_MAX || posix_memalign(&p, (size_t)alignment, (size_t)nbytes) != 0 ||
        !p)
        return nnp_host_fail(NNP_STATUS_OUT_OF_MEMORY,
                             "alloc_data_space: cannot allocate %llu bytes",
                             (unsigned long long)nbytes);
    *out = p;
    return NNP_OK;
}

static inline nnp_status nnp_host_free_data_space(nnp_device dev, void *handle)
{
    (void)dev;
    free(handle);
    return NNP_OK;
}

static inline nnp_status nnp_host_copy_data_from_to(const void *from, uint64_t from_offset,
                                                    void *to, uint64_t to_offset, uint64_t nbytes,
                                                    nnp_device dev_from, nnp_device dev_to,
                                                    int32_t kind, nnp_stream stream)
{
    (void)dev_from;
    (void)dev_to;
    (void)stream; /* host copies complete before returning, whatever the stream */
    if (kind < NNP_COPY_HOST_TO_DEVICE || kind > NNP_COPY_DEVICE_TO_DEVICE)
        return nnp_host_fail(NNP_STATUS_INVALID_ARGUMENT, "copy_data_from_to: unknown kind %d",
                             (int)kind);
    if (!nbytes) return NNP_OK;
    if (!from || !to)
        return nnp_host_fail(NNP_STATUS_INVALID_ARGUMENT, "copy_data_from_to: NULL buffer");
    memmove((char *)to + to_offset, (const char *)from + from_offset, (size_t)nbytes);
    return NNP_OK;
}

/* ---- workspaces and streams (optional in the table) --------------------------------------- */

static inline nnp_status nnp_host_set_device(nnp_device dev)
{
    return nnp_host_check_device(dev, "set_device");
}

static inline nnp_status nnp_host_alloc_workspace(nnp_device dev, uint64_t nbytes,
                                                  nnp_dtype type_hint, void **out)
{
    return nnp_host_alloc_data_space(dev, nbytes ? nbytes : 1, 64, type_hint, out);
}

static inline nnp_status nnp_host_free_workspace(nnp_device dev, void *handle)
{
    return nnp_host_free_data_space(dev, handle);
}

static inline nnp_status nnp_host_create_stream(nnp_device dev, nnp_stream *out)
{
    if (!out) return nnp_host_fail(NNP_STATUS_INVALID_ARGUMENT, "create_stream: out is NULL");
    *out = NULL;
    nnp_status rc = nnp_host_check_device(dev, "create_stream");
    if (rc != NNP_OK) return rc;
    *out = malloc(1); /* a token: a distinct non-NULL handle */
    return *out ? NNP_OK : nnp_host_fail(NNP_STATUS_OUT_OF_MEMORY, "create_stream: out of memory");
}

static inline nnp_status nnp_host_free_stream(nnp_device dev, nnp_stream stream)
{
    nnp_status rc = nnp_host_check_device(dev, "free_stream");
    if (rc == NNP_OK) free(stream);
    return rc;
}

static inline nnp_status nnp_host_set_stream(nnp_device dev, nnp_stream stream)
{
    (void)stream;
    return nnp_host_check_device(dev, "set_stream");
}

static inline nnp_status nnp_host_stream_sync(nnp_device dev, nnp_stream stream)
{
    (void)stream;
    return nnp_host_check_device(dev, "stream_sync");
}

static inline nnp_status nnp_host_sync_stream_from_to(nnp_device dev, nnp_stream src,
                                                      nnp_stream dst)
{
    (void)src;
    (void)dst;
    return nnp_host_check_device(dev, "sync_stream_from_to");
}

/* ---- filling the table -------------------------------------------------------------------- */

/* The REQUIRED memory entries, in a designated initializer of nnp_backend_v1. */
#define NNP_HOST_DEVICE_MEMORY                                                                  \
    .alloc_data_space = nnp_host_alloc_data_space, .free_data_space = nnp_host_free_data_space, \
    .copy_data_from_to = nnp_host_copy_data_from_to

/* The OPTIONAL set_device, workspace and stream entries (all of them), likewise. Without them
 * the host pools alloc_data_space blocks itself and uses one queue. */
#define NNP_HOST_DEVICE_STREAMS                                                         \
    .set_device = nnp_host_set_device, .alloc_workspace = nnp_host_alloc_workspace,     \
    .free_workspace = nnp_host_free_workspace, .create_stream = nnp_host_create_stream, \
    .free_stream = nnp_host_free_stream, .set_stream = nnp_host_set_stream,             \
    .stream_sync = nnp_host_stream_sync, .sync_stream_from_to = nnp_host_sync_stream_from_to

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* NNPLUG_HOST_DEVICE_H_ */
