/* idle: the memory experiment's instance (shoal bench memory, Spacer-Δ's
 * Fig. 8). Like the paper's Nginx instances, it links the versioned library
 * (SQLite) and then idles: it opens an in-memory database, runs one
 * statement, prints the library version, and sleeps until it is killed.
 *
 * shoal's kernel has no pause(2); a long nanosleep blocks in the poll
 * hypercall, so an idle instance uses no CPU.
 *
 * With an argument N > 0 it exits after N sleeps of 1 ms instead (used by
 * tests). With an argument work=ROWS it first runs a workload — ROWS
 * inserts into an indexed table and a few queries — so that its heap grows
 * before it idles (the experiment's second variant, docs/design.md "Experiments"). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
    long rows = 0, n = 0;
    for (int i = 1; i < argc; i++) {
        if (strncmp(argv[i], "work=", 5) == 0)
            rows = atol(argv[i] + 5);
        else
            n = atol(argv[i]);
    }
    if (rows > 0) {
        char sql[256];
        int count = 0;
        if (sqlite3_exec(db, "CREATE TABLE t(a INTEGER PRIMARY KEY, b TEXT, c INTEGER);"
                             "CREATE INDEX tc ON t(c); BEGIN;", NULL, NULL, NULL) != SQLITE_OK)
            return 1;
        for (long i = 0; i < rows; i++) {
            snprintf(sql, sizeof sql, "INSERT INTO t(b, c) VALUES('row %ld of the workload', %ld)", i, (i * 7919) % 1000);
            if (sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK)
                return 1;
        }
        if (sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK ||
            sqlite3_exec(db, "SELECT count(*) FROM t WHERE c < 500", row, &count, NULL) != SQLITE_OK)
            return 1;
        printf("idle: workload of %ld rows done (%d match)\n", rows, count);
    }
    printf("idle: sqlite %s ready\n", sqlite3_libversion());
    fflush(stdout);
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
