//! Fuzzes spt's hypercall dispatch (`shoal_spt::fuzz`): up to eight
//! hypercalls with random numbers and argument addresses over guest memory
//! holding the rest of the input at `HEAP_START` (argument structures,
//! `Net` batches and their socket handles, `Protect`/`Alias`/`Release`
//! requests and lists). The handlers must answer or end the instance,
//! never crash or write outside writable guest memory (the harness maps
//! the part below `HEAP_START` read-only).
//!
//! Input: byte 0 is the number of calls (mod 9), then per call one byte of
//! hypercall number and four bytes (little-endian) of argument address;
//! the rest is guest memory.
#![no_main]

use libfuzzer_sys::fuzz_target;
use shoal_spt::fuzz::Harness;
use std::sync::Mutex;

static HARNESS: Mutex<Option<Harness>> = Mutex::new(None);

fuzz_target!(|data: &[u8]| {
    let mut guard = HARNESS.lock().unwrap_or_else(|e| e.into_inner());
    let h = guard.get_or_insert_with(|| {
        let h = Harness::new().unwrap_or_else(|e| panic!("{e}"));
        if !h.network {
            eprintln!("shoal-spt fuzz: no network namespace of its own (not root?): Net and NetPoll are not fuzzed");
        }
        h
    });
    let Some((&n, rest)) = data.split_first() else { return };
    let n = usize::from(n % 9);
    if rest.len() < n * 5 {
        return;
    }
    let (calls, blob) = rest.split_at(n * 5);
    h.reset(blob);
    for c in calls.chunks_exact(5) {
        let nr = u64::from(c[0]);
        let arg = u64::from(u32::from_le_bytes([c[1], c[2], c[3], c[4]]));
        if h.call(nr, arg).is_err() {
            break;
        }
    }
});
