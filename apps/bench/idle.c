/* idle: the memory experiment's instance (shoal bench memory, seed 000
 * Fig. 8). Like the paper's Nginx instances, it links the versioned library
 * (SQLite) and then idles: it opens an in-memory database, runs one
 * statement, prints the library version, and sleeps until it is killed.
 *
 * shoal's kernel has no pause(2); a long nanosleep blocks in the poll
 * hypercall, so an idle instance uses no CPU.
 *
 * With an argument N > 0 it exits after N sleeps of 1 ms instead (used by
 * tests). */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "sqlite3.h"

static int row(void *arg, int n, char **values, char **names) {
    (void)n; (void)names;
    *(int *)arg = values[0] ? atoi(values[0]) : -1;
    return 0;
}

int main(int argc, char **argv) {
    sqlite3 *db;
    int answer = 0;
    if (sqlite3_open(":memory:", &db) != SQLITE_OK) {
        fprintf(stderr, "idle: cannot open a database\n");
        return 1;
    }
    if (sqlite3_exec(db, "SELECT 6*7", row, &answer, NULL) != SQLITE_OK || answer != 42) {
        fprintf(stderr, "idle: the statement failed\n");
        return 1;
    }
    printf("idle: sqlite %s ready\n", sqlite3_libversion());
    fflush(stdout);
    long n = argc > 1 ? atol(argv[1]) : 0;
    if (n > 0) {
        struct timespec ms = {0, 1000000};
        for (long i = 0; i < n; i++) nanosleep(&ms, NULL);
        sqlite3_close(db);
        return 0;
    }
    for (;;) {
        struct timespec hour = {3600, 0};
        nanosleep(&hour, NULL);
    }
}
