/*
 * matmul: parallel matrix multiplication (shoal recipe `matmul`).
 *
 *   matmul N THREADS OUTFILE
 *
 * Multiplies two deterministic N x N matrices of doubles with THREADS POSIX
 * threads (each computes a band of rows; THREADS = 1 computes in the main
 * thread without creating any), writes the product to OUTFILE (raw doubles,
 * row-major), reads the file back and prints its size, an FNV-1a hash of its
 * bytes and the sum of the product's elements. The inputs are small integers,
 * so every product element is an exact integer: the output does not depend
 * on THREADS.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static size_t n;
static double *a, *b, *c;

struct band {
    size_t from, to;
};

static void *multiply(void *arg)
{
    const struct band *band = arg;
    for (size_t i = band->from; i < band->to; i++) {
        double *ci = c + i * n;
        for (size_t j = 0; j < n; j++)
            ci[j] = 0.0;
        for (size_t k = 0; k < n; k++) {
            double aik = a[i * n + k];
            const double *bk = b + k * n;
            for (size_t j = 0; j < n; j++)
                ci[j] += aik * bk[j];
        }
    }
    return NULL;
}

static void die(const char *what)
{
    fprintf(stderr, "matmul: %s: %s\n", what, strerror(errno));
    exit(1);
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: %s N THREADS OUTFILE\n", argv[0]);
        return 2;
    }
    n = strtoul(argv[1], NULL, 10);
    size_t threads = strtoul(argv[2], NULL, 10);
    const char *path = argv[3];
    if (n == 0 || threads == 0 || threads > 256) {
        fprintf(stderr, "matmul: N and THREADS must be positive (THREADS at most 256)\n");
        return 2;
    }
    if (threads > n)
        threads = n;
    a = malloc(n * n * sizeof *a);
    b = malloc(n * n * sizeof *b);
    c = malloc(n * n * sizeof *c);
    if (!a || !b || !c)
        die("malloc");
    uint32_t x = 12345;
    for (size_t i = 0; i < n * n; i++) {
        x = x * 1103515245u + 12345u;
        a[i] = (double)((x >> 16) % 19) - 9.0;
        x = x * 1103515245u + 12345u;
        b[i] = (double)((x >> 16) % 17) - 8.0;
    }

    struct band bands[256];
    pthread_t tids[256];
    for (size_t t = 0; t < threads; t++) {
        bands[t].from = n * t / threads;
        bands[t].to = n * (t + 1) / threads;
    }
    if (threads == 1) {
        multiply(&bands[0]);
    } else {
        for (size_t t = 0; t < threads; t++) {
            int e = pthread_create(&tids[t], NULL, multiply, &bands[t]);
            if (e) {
                errno = e;
                die("pthread_create");
            }
        }
        for (size_t t = 0; t < threads; t++) {
            int e = pthread_join(tids[t], NULL);
            if (e) {
                errno = e;
                die("pthread_join");
            }
        }
    }

    FILE *f = fopen(path, "wb");
    if (!f)
        die(path);
    if (fwrite(c, sizeof *c, n * n, f) != n * n || fclose(f) != 0)
        die(path);

    f = fopen(path, "rb");
    if (!f)
        die(path);
    uint64_t hash = 0xcbf29ce484222325ull, size = 0;
    unsigned char buf[65536];
    size_t got;
    while ((got = fread(buf, 1, sizeof buf, f)) > 0) {
        for (size_t i = 0; i < got; i++)
            hash = (hash ^ buf[i]) * 0x100000001b3ull;
        size += got;
    }
    if (ferror(f))
        die(path);
    fclose(f);

    double sum = 0.0;
    for (size_t i = 0; i < n * n; i++)
        sum += c[i];
    printf("matmul %zux%zu: result file holds %llu bytes, fnv1a %016llx, sum %.1f\n", n, n,
           (unsigned long long)size, (unsigned long long)hash, sum);
    free(a);
    free(b);
    free(c);
    return 0;
}
