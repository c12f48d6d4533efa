//! Threads (cooperative, one vCPU): the programs in `apps/tests/` print
//! what the same source prints as a native static musl program; a deadlock
//! is reported and stops the instance; memory exhaustion is clean.

mod common;
use common::*;

#[test]
fn create_join_sum() {
    matches_native_with("threads_sum.c", &[]);
}

#[test]
fn threads_created_in_a_loop_joinable_and_detached() {
    // 32 MiB: the 2000 detached threads' stacks (about 136 KiB each) only
    // fit if each is freed when its thread exits.
    matches_native_with("threads_loop.c", &["--mem", "32M"]);
}

#[test]
fn mutex_condvar_producer_consumer() {
    matches_native_with("prodcons.c", &[]);
}

#[test]
fn thread_local_storage_per_thread() {
    matches_native_with("tls.c", &[]);
}

#[test]
fn pthread_cancel_at_cancellation_points() {
    matches_native_with("cancel.c", &[]);
}

#[test]
fn sleeping_blocks_only_the_calling_thread() {
    matches_native_with("sleep.c", &[]);
}

#[test]
fn blocking_pipe_reads_and_poll_wait_for_other_threads() {
    matches_native_with("pipes_threads.c", &[]);
}

#[test]
fn deadlock_is_reported_and_stops_the_instance() {
    let dir = scratch();
    let image = build_image(&test_app("deadlock.c"), dir.path(), &[]);
    for tender in tenders() {
        let t0 = std::time::Instant::now();
        let s = output(shoal_run(tender).arg(&image));
        assert_eq!(stdout(&s), "both hold one lock\n", "{tender}");
        assert_eq!(stderr(&s), "shoal: deadlock: all 2 threads are blocked and nothing can wake them\n", "{tender}");
        assert_eq!(s.status.code(), Some(255), "{tender}");
        assert!(t0.elapsed().as_secs() < 10, "{tender}");
    }
}

#[test]
fn memory_exhaustion_is_clean() {
    let dir = scratch();
    let image = build_image(&test_app("oom.c"), dir.path(), &[]);
    let expect = "huge mmap: ENOMEM\n\
                  malloc until NULL: errno ENOMEM, got at least 16 MiB: yes\n\
                  pthread_create with no memory: EAGAIN\n\
                  after free, malloc 8 MiB: ok\n\
                  pthread_create after free: ok 5\n";
    for tender in tenders() {
        for mem in ["64M", "256M"] {
            let s = output(shoal_run(tender).args(["--mem", mem]).arg(&image));
            assert_eq!(stdout(&s), expect, "{tender} --mem {mem}; stderr: {}", stderr(&s));
            assert_eq!(stderr(&s), "", "{tender} --mem {mem}");
            assert_eq!(s.status.code(), Some(0), "{tender} --mem {mem}");
        }
    }
}
