/*
 * pcre2-count: a small grep-like program over PCRE2 (shoal recipe
 * `pcre2-grep`).
 *
 *   pcre2-count SIZE_KIB FILE
 *
 * Generates SIZE_KIB KiB of deterministic text (lines of words, numbers,
 * dates, e-mail addresses and URLs drawn by a fixed pseudo-random
 * generator), writes it to FILE, reads FILE back and, for each of several
 * patterns, counts the matches in the whole text and the lines that match
 * (as `grep -c` would), then prints the counts. 6144 KiB is the benchmark's
 * size (6 MiB).
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <errno.h>
#include <pcre2.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const patterns[] = {
    "[A-Z][a-z]+ing\\b",
    "\\b\\d{4}-\\d{2}-\\d{2}\\b",
    "[\\w.]+@[\\w]+\\.(?:com|org|net)",
    "https?://[a-z0-9./]+",
    "(?i)\\bshoal\\b",
    "\\b(\\w)\\w*\\1\\b",
    "colou?r|flavou?r",
    "^[^ ]+ [^ ]+$",
};

static const char *const words[] = {
    "the", "shoal", "of", "unikernels", "swims", "Running", "quickly", "colour", "color", "library",
    "Sharing", "pages", "kernel", "memory", "a", "level", "noon", "Building", "flavor", "image",
    "SHOAL", "radar", "binary", "function", "Shoal", "and", "static", "Linking", "tender", "fast",
};

static uint64_t state = 0x9e3779b97f4a7c15ull;

static uint32_t next(void)
{
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return (uint32_t)(state >> 11);
}

static size_t generate(char *out, size_t size)
{
    size_t len = 0;
    char item[96];
    while (len < size) {
        int nitems = 1 + next() % 12;
        for (int i = 0; i < nitems; i++) {
            uint32_t r = next() % 20;
            int m;
            if (r < 14)
                m = snprintf(item, sizeof item, "%s", words[next() % (sizeof words / sizeof *words)]);
            else if (r < 16)
                m = snprintf(item, sizeof item, "%u", next() % 100000);
            else if (r < 17)
                m = snprintf(item, sizeof item, "%04u-%02u-%02u", 1990 + next() % 40, 1 + next() % 12,
                             1 + next() % 28);
            else if (r < 18)
                m = snprintf(item, sizeof item, "%s.%s@%s.%s", words[next() % 30], words[next() % 30],
                             words[next() % 30], (const char *[]){"com", "org", "net", "io"}[next() % 4]);
            else if (r < 19)
                m = snprintf(item, sizeof item, "http%s://%s.example/%s/%u", next() % 2 ? "s" : "",
                             words[next() % 30], words[next() % 30], next() % 1000);
            else
                m = snprintf(item, sizeof item, "%s%s", words[next() % 30], words[next() % 30]);
            if (i > 0)
                item[m++] = 0, memmove(item + 1, item, (size_t)m), item[0] = ' ', m = (int)strlen(item);
            if (len + (size_t)m + 1 > size)
                goto done;
            memcpy(out + len, item, (size_t)m);
            len += (size_t)m;
        }
        out[len++] = '\n';
    }
done:
    while (len < size)
        out[len++] = '\n';
    return len;
}

static void die(const char *what)
{
    fprintf(stderr, "pcre2-count: %s: %s\n", what, strerror(errno));
    exit(1);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s SIZE_KIB FILE\n", argv[0]);
        return 2;
    }
    size_t size = strtoul(argv[1], NULL, 10) * 1024;
    const char *path = argv[2];
    if (size == 0) {
        fprintf(stderr, "pcre2-count: SIZE_KIB must be positive\n");
        return 2;
    }
    char *text = malloc(size);
    if (!text)
        die("malloc");
    size_t len = generate(text, size);
    FILE *f = fopen(path, "wb");
    if (!f)
        die(path);
    if (fwrite(text, 1, len, f) != len || fclose(f) != 0)
        die(path);
    memset(text, 0, size);
    f = fopen(path, "rb");
    if (!f)
        die(path);
    size_t got = fread(text, 1, size, f);
    if (ferror(f) || got != len)
        die(path);
    fclose(f);

    size_t lines = 0;
    for (size_t i = 0; i < len; i++)
        lines += text[i] == '\n';
    printf("text: %zu bytes, %zu lines\n", len, lines);

    pcre2_match_data *md = pcre2_match_data_create(16, NULL);
    if (!md)
        die("pcre2_match_data_create");
    for (size_t p = 0; p < sizeof patterns / sizeof *patterns; p++) {
        int err;
        PCRE2_SIZE erroff;
        pcre2_code *re = pcre2_compile((PCRE2_SPTR)patterns[p], PCRE2_ZERO_TERMINATED,
                                       PCRE2_MULTILINE | PCRE2_UTF, &err, &erroff, NULL);
        if (!re) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(err, msg, sizeof msg);
            fprintf(stderr, "pcre2-count: pattern %s at %zu: %s\n", patterns[p], (size_t)erroff, msg);
            return 1;
        }
        size_t matches = 0, matching_lines = 0, last_line_end = 0;
        PCRE2_SIZE off = 0;
        for (;;) {
            /* The text is checked for valid UTF-8 once, by the first match. */
            int rc = pcre2_match(re, (PCRE2_SPTR)text, len, off, off ? PCRE2_NO_UTF_CHECK : 0, md, NULL);
            if (rc == PCRE2_ERROR_NOMATCH)
                break;
            if (rc < 0) {
                fprintf(stderr, "pcre2-count: matching %s failed (%d)\n", patterns[p], rc);
                return 1;
            }
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
            matches++;
            if (ov[0] >= last_line_end) {
                matching_lines++;
                const char *nl = memchr(text + ov[0], '\n', len - ov[0]);
                last_line_end = nl ? (size_t)(nl - text) + 1 : len;
            }
            off = ov[1] > ov[0] ? ov[1] : ov[1] + 1;
            if (off > len)
                break;
        }
        printf("%-36s %8zu matches %8zu lines\n", patterns[p], matches, matching_lines);
        pcre2_code_free(re);
    }
    pcre2_match_data_free(md);
    free(text);
    return 0;
}
