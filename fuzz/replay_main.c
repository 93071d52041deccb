/* SPDX-License-Identifier: MIT */
/*
 * replay_main: a main() that runs a libFuzzer harness without libFuzzer. Every file of the
 * directories named on the command line (or a file named directly) goes once through
 * LLVMFuzzerTestOneInput, in name order. The normal builds link each fuzz/fuzz_<parser>.c
 * with it and `make test` replays fuzz/corpus/<parser>/ this way, under gcc's ASan + UBSan:
 * a seed that breaks a harness's properties fails a unit test in seconds, instead of waiting
 * for someone to run `make fuzz` (which needs clang).
 *
 * Each input is copied into a buffer of exactly its size, as libFuzzer does, so a read past
 * the end is caught. The name of each input is printed before it runs: a harness stops at a
 * broken property with a trap, and the last name printed is the culprit. An empty or
 * unreadable corpus is a failure too, so a corpus that went missing cannot pass unnoticed.
 */
#include <dirent.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Feeds one file to the harness; false when it cannot be read. */
static bool replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    struct stat st;
    if (!f || fstat(fileno(f), &st) != 0) {
        fprintf(stderr, "replay: cannot open %s\n", path);
        if (f)
            fclose(f);
        return false;
    }
    /* exactly the file's size, so ASan sees any read past the input */
    size_t size = (size_t)st.st_size;
    uint8_t *data = malloc(size ? size : 1);
    if (!data)
        abort();
    bool ok = fread(data, 1, size, f) == size;
    fclose(f);
    if (ok) {
        printf("replay: %s (%zu bytes)\n", path, size);
        fflush(stdout);
        LLVMFuzzerTestOneInput(data, size);
    } else {
        fprintf(stderr, "replay: cannot read %s\n", path);
    }
    free(data);
    return ok;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Replays every regular file of `dir` in name order; returns how many, or -1 on an error. */
static long replay_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "replay: cannot open directory %s\n", dir);
        return -1;
    }
    char **paths = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            char **grown = realloc(paths, cap * sizeof *paths);
            if (!grown)
                abort();
            paths = grown;
        }
        if (asprintf(&paths[n], "%s/%s", dir, e->d_name) < 0)
            abort();
        n++;
    }
    closedir(d);
    qsort(paths, n, sizeof *paths, by_name);
    long done = 0;
    for (size_t i = 0; i < n; i++) {
        struct stat st;
        if (stat(paths[i], &st) == 0 && S_ISREG(st.st_mode)) {
            if (!replay_file(paths[i]))
                done = -1;
            else if (done >= 0)
                done++;
        }
        free(paths[i]);
    }
    free(paths);
    return done;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR_OR_FILE...\n", argv[0]);
        return 2;
    }
    for (int i = 1; i < argc; i++) {
        struct stat st;
        long n;
        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "replay: %s does not exist\n", argv[i]);
            return 1;
        }
        n = S_ISDIR(st.st_mode) ? replay_dir(argv[i]) : (replay_file(argv[i]) ? 1 : -1);
        if (n <= 0) {
            fprintf(stderr, "replay: %s: %s\n", argv[i], n == 0 ? "no inputs" : "failed");
            return 1;
        }
        printf("replay: %s: %ld inputs passed\n", argv[i], n);
    }
    return 0;
}
