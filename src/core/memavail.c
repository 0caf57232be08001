/* The memory this process may use: the machine's RAM, or less where a cgroup limits it (a
 * container's memory.max under cgroup v2, memory.limit_in_bytes under v1), so that every
 * front end's default memory budget fits the container it runs in, not the host. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core.h"
#include "s3flash/s3flash.h"

/* v1 writes "no limit" as the largest page-aligned signed 64-bit number */
#define NO_LIMIT_V1 (1ull << 62)

/* The mount point of the hierarchy of filesystem type fstype ("cgroup2", or "cgroup" with the
 * super option `memory`) and the cgroup path it shows (its root in /proc/self/mountinfo). */
static bool find_mount(bool v2, char *dir, size_t dlen, char *root, size_t rlen) {
    FILE *f = fopen("/proc/self/mountinfo", "re");
    if (!f)
        return false;
    char line[4096];
    bool found = false;
    while (!found && fgets(line, sizeof line, f)) {
        /* ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [TAGS...] - FSTYPE SOURCE SUPEROPTS */
        char r[1024], mp[1024], fstype[64], src[256], sopts[1024] = "";
        char *sep = strstr(line, " - ");
        if (!sep || sscanf(line, "%*s %*s %*s %1023s %1023s", r, mp) != 2 ||
            sscanf(sep + 3, "%63s %255s %1023s", fstype, src, sopts) < 2)
            continue;
        if (v2 ? strcmp(fstype, "cgroup2") != 0 : strcmp(fstype, "cgroup") != 0)
            continue;
        if (!v2) {
            bool mem = false;
            for (char *save = NULL, *o = strtok_r(sopts, ",", &save); o;
                 o = strtok_r(NULL, ",", &save))
                mem |= strcmp(o, "memory") == 0;
            if (!mem)
                continue;
        }
        snprintf(dir, dlen, "%s", mp);
        snprintf(root, rlen, "%s", r);
        found = true;
    }
    fclose(f);
    return found;
}

/* The smallest limit in file `name` of cgroup `path` (as /proc/self/cgroup names it) and
 * each cgroup above it that the hierarchy mounted at `dir` (showing `root`) holds. */
static uint64_t walk(const char *dir, const char *root, const char *path, const char *name) {
    char rel[2048];
    size_t rl = strlen(root);
    /* a mount of a sub-tree (a container's own cgroup bind-mounted at the top) */
    if (strcmp(root, "/") != 0 && strncmp(path, root, rl) == 0 &&
        (path[rl] == '/' || !path[rl]))
        path += rl;
    snprintf(rel, sizeof rel, "%s", path);
    uint64_t best = UINT64_MAX;
    for (;;) {
        char file[4096], buf[64];
        snprintf(file, sizeof file, "%s%s/%s", dir, strcmp(rel, "/") == 0 ? "" : rel, name);
        FILE *f = fopen(file, "re");
        if (f) {
            if (fgets(buf, sizeof buf, f) && strncmp(buf, "max", 3) != 0) {
                char *end;
                unsigned long long v = strtoull(buf, &end, 10);
                if (end != buf && v < NO_LIMIT_V1 && v < best)
                    best = v;
            }
            fclose(f);
        }
        char *slash = strrchr(rel, '/');
        if (!slash || (slash == rel && !rel[1]))
            break;
        if (slash == rel)
            rel[1] = 0;
        else
            *slash = 0;
    }
    return best;
}

uint64_t s3f__cgroup_memory_limit(void) {
    FILE *f = fopen("/proc/self/cgroup", "re");
    if (!f)
        return UINT64_MAX;
    char line[4096], dir[1024], root[1024];
    uint64_t best = UINT64_MAX;
    const char *v2dir = NULL;
#ifdef S3F_TEST_HOOKS
    /* test builds only: the cgroup v2 hierarchy is this directory (a test's tree) */
    v2dir = getenv("S3FLASH_TEST_CGROUP2_ROOT");
    if (v2dir && !*v2dir)
        v2dir = NULL;
#endif
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        /* ID:CONTROLLERS:PATH; v2 is "0::PATH" */
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2 || c2[1] != '/')
            continue;
        *c1 = *c2 = 0;
        const char *ctrl = c1 + 1, *path = c2 + 1;
        uint64_t v = UINT64_MAX;
        if (!*ctrl && strcmp(line, "0") == 0) {
            if (v2dir)
                v = walk(v2dir, "/", path, "memory.max");
            else if (find_mount(true, dir, sizeof dir, root, sizeof root))
                v = walk(dir, root, path, "memory.max");
        } else {
            char cs[256];
            snprintf(cs, sizeof cs, ",%s,", ctrl);
            if (strstr(cs, ",memory,") && find_mount(false, dir, sizeof dir, root, sizeof root))
                v = walk(dir, root, path, "memory.limit_in_bytes");
        }
        if (v < best)
            best = v;
    }
    fclose(f);
    return best;
}

S3F_API uint64_t s3f_memory_available(void) {
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    uint64_t ram = (pages > 0 && psz > 0) ? (uint64_t)pages * (uint64_t)psz : (4ull << 30);
    uint64_t cg = s3f__cgroup_memory_limit();
    return cg < ram ? cg : ram;
}
