/* Read bandwidth of this machine's caches and DRAM, for docs/performance.md (issue #9).
 * Sums 64-bit lanes of a buffer with AVX2 (AVX-512 where compiled for it), OpenMP threads
 * splitting it statically; the best of REPS passes. Usage: membw BYTES REPS */
#include <immintrin.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: membw BYTES REPS\n");
        return 2;
    }
    size_t n = (size_t)atoll(argv[1]) / 256 * 256;
    int reps = atoi(argv[2]);
    long long *a = aligned_alloc(64, n);
    if (!a) return 1;
    size_t m = n / 8;
    for (size_t i = 0; i < m; i++) a[i] = (long long)i * 7;
    double best = 1e30;
    long long total = 0;
    for (int r = 0; r < reps; r++) {
        double t0 = now();
        long long tot = 0;
#pragma omp parallel for reduction(+ : tot) schedule(static)
        for (size_t i = 0; i < m; i += 32) {
            __m256i s = _mm256_add_epi64(_mm256_load_si256((__m256i *)(a + i)),
                                         _mm256_load_si256((__m256i *)(a + i + 4)));
            s = _mm256_add_epi64(s, _mm256_load_si256((__m256i *)(a + i + 8)));
            s = _mm256_add_epi64(s, _mm256_load_si256((__m256i *)(a + i + 12)));
            s = _mm256_add_epi64(s, _mm256_load_si256((__m256i *)(a + i + 16)));
            s = _mm256_add_epi64(s, _mm256_load_si256((__m256i *)(a + i + 20)));
            s = _mm256_add_epi64(s, _mm256_load_si256((__m256i *)(a + i + 24)));
            s = _mm256_add_epi64(s, _mm256_load_si256((__m256i *)(a + i + 28)));
            long long v[4];
            _mm256_storeu_si256((__m256i *)v, s);
            tot += v[0] + v[1] + v[2] + v[3];
        }
        double t = now() - t0;
        if (t < best) best = t;
        total += tot;
    }
    /* Printing the sum keeps the compiler from dropping the loads. */
    printf("{\"bytes\": %zu, \"threads\": %d, \"gb_s\": %.1f, \"check\": %lld}\n", n,
           omp_get_max_threads(), n / best / 1e9, total & 1);
    free(a);
    return 0;
}
