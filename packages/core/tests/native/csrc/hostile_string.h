/* The hostile strings the string-bounding tests hand to the host (test_hostile_plugins.py):
 * kind 1: no NUL before a PROT_NONE guard page; 2: not UTF-8; 3: 16 MB long; else "ok".
 * Define _DEFAULT_SOURCE before the first system header (mmap under -std=c99). */
#ifndef NNPTEST_HOSTILE_STRING_H_
#define NNPTEST_HOSTILE_STRING_H_

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static const char *hostile_string(int kind)
{
    if (kind == 1) {
        long page = sysconf(_SC_PAGESIZE);
        char *mem = mmap(NULL, (size_t)(2 * page), PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (mem == MAP_FAILED) return NULL;
        memset(mem, 'a', (size_t)page);                /* no NUL anywhere in the readable page */
        mprotect(mem + page, (size_t)page, PROT_NONE); /* the guard */
        return mem + page - 8;                         /* 8 bytes, then unreadable memory */
    }
    if (kind == 2) return "dev\xff\xfe\xc3(name";
    if (kind != 3) return "ok";
    size_t n = (size_t)16 << 20;
    char *s = malloc(n + 1);
    if (!s) return NULL;
    memset(s, 'a', n);
    s[n] = 0;
    return s;
}

#endif
